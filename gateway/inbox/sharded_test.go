package inbox_test

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/shardtest"
	"github.com/inboxd/inboxd/internal/workload"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestShardedReadMatchesOne: the same log projected on one server and on
// two (internal/shardtest's world: duplicates, redeliveries, a relay that
// produces twice); the reader over the two servers gives every user what
// the reader of the one gives: per conversation the same entries with the
// same messages, records, reactions marked as the reader's, the same head
// and record version, totals and large list (with its mark), through
// Read of one user with counts, of all users at once, cold and with a warm
// cache, through Resolve of announced runs, and LargeLists.
// (The inbox_seqs differ: the two servers interleave a user's
// conversations in another order.)
func TestShardedReadMatchesOne(t *testing.T) {
	w := shardtest.NewWorld(t, 33)
	g := workload.New(workload.Config{Seed: 33, Users: 60, Conversations: 25, MaxMembers: 16, PinPct: 2, ReadPct: 8,
		EditPct: 3, DeletePct: 1, ReactPct: 5, UnreactPct: 1, ReplyPct: 2})
	w.Run(g, 3, 1200)
	ctx := context.Background()
	ofUser, ofConv := w.OfUser, w.OfConv
	one := inbox.New(w.One, inbox.Config{})
	two := inbox.NewSharded(inbox.Servers{DBs: []inbox.Querier{w.Shards[0], w.Shards[1]},
		OfUser: ofUser, OfConversation: ofConv}, inbox.Config{})

	var users []int64
	rows, err := w.One.Query(ctx, `SELECT id FROM users ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var u int64
		require.NoError(t, rows.Scan(&u))
		users = append(users, u)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, users)

	// byConv is a page's entries by conversation, without their inbox_seq.
	var crossedMsgs, crossedRecs, reacted int
	versions := map[[2]int64]int64{} // (user, conversation): the version of the sharded read's record
	byConv := func(user int64, p inbox.Page, count bool) map[int64][]string {
		out := map[int64][]string{}
		for _, e := range p.Entries {
			b, err := json.Marshal(e)
			require.NoError(t, err)
			var m map[string]any
			require.NoError(t, json.Unmarshal(b, &m))
			carried := "message" // an update entry's too
			if m["kind"] == "record" {
				carried = "record"
			}
			require.NotNil(t, m[carried], "user %d entry %d carries its %s", user, e.InboxSeq, carried)
			delete(m, "inbox_seq")
			if rec, ok := m["record"].(map[string]any); ok {
				// A record's version counts the user's record changes
				// over all its conversations (users.record_version),
				// which each server interleaves in its own order: it is
				// checked against the user's server below.
				if count {
					versions[[2]int64{user, e.ConversationID}] = int64(rec["version"].(float64))
				}
				delete(rec, "version")
			}
			b, err = json.Marshal(m)
			require.NoError(t, err)
			out[e.ConversationID] = append(out[e.ConversationID], string(b))
			if count && ofConv(e.ConversationID) != ofUser(user) {
				if m["kind"] == "record" {
					crossedRecs++
				} else {
					crossedMsgs++
				}
			}
			if msg, ok := m["message"].(map[string]any); ok && count && msg["reactions"] != nil {
				reacted++
			}
		}
		return out
	}
	all := func(r *inbox.Reader) []inbox.Req {
		reqs := make([]inbox.Req, len(users))
		for i, u := range users {
			reqs[i] = inbox.Req{User: u, Limit: math.MaxInt32}
		}
		return reqs
	}

	large := 0
	for pass := range 2 { // cold, then with the messages cached
		for _, u := range users {
			req := []inbox.Req{{User: u, Limit: math.MaxInt32, Counts: true, KnownHead: -1, KnownEpoch: -1}}
			want, err := one.Read(ctx, req, math.MaxInt64)
			require.NoError(t, err)
			got, err := two.Read(ctx, req, math.MaxInt64)
			require.NoError(t, err)
			a, b := want[0], got[0]
			require.Equal(t, a.Head, b.Head, "user %d head", u)
			require.Equal(t, a.RecordVersion, b.RecordVersion, "user %d record version", u)
			require.Equal(t, a.Counts, b.Counts, "user %d totals", u)
			require.Equal(t, a.Large, b.Large, "user %d large list", u)
			require.Equal(t, a.LargeJoined, b.LargeJoined, "user %d large joined", u)
			require.Equal(t, a.LargeMark, b.LargeMark, "user %d large mark", u)
			require.Equal(t, byConv(u, a, false), byConv(u, b, pass == 0), "user %d entries (pass %d)", u, pass)
			if pass == 0 && len(b.Large) > 0 {
				large++
			}
		}
		want, err := one.Read(ctx, all(one), math.MaxInt64)
		require.NoError(t, err)
		got, err := two.Read(ctx, all(two), math.MaxInt64)
		require.NoError(t, err)
		for i, u := range users {
			require.Equal(t, want[i].Head, got[i].Head, "user %d head, all at once", u)
			require.Equal(t, byConv(u, want[i], false), byConv(u, got[i], false), "user %d entries, all at once (pass %d)", u, pass)
		}
	}
	for k, v := range versions {
		var stored int64
		require.NoError(t, w.Shards[ofUser(k[0])].QueryRow(ctx, `SELECT version FROM records WHERE user_id = $1 AND conversation_id = $2`,
			k[0], k[1]).Scan(&stored))
		require.Equal(t, stored, v, "record %v carries its user's server's version", k)
	}
	require.Positive(t, crossedMsgs, "messages of other servers' conversations were read")
	require.Positive(t, crossedRecs, "records of other servers' conversations were read")
	require.Positive(t, reacted, "messages with reactions were read")
	require.Positive(t, large, "users with read-mode conversations")

	// Resolve: each user's first run of message entries, as the
	// notifications would announce it, gives the entries Read gives.
	got, err := two.Read(ctx, all(two), math.MaxInt64)
	require.NoError(t, err)
	var runs []inbox.Announced
	var from []int
	for i, p := range got {
		var keys [][2]int64
		for _, e := range p.Entries {
			b, err := json.Marshal(e)
			require.NoError(t, err)
			var m struct {
				Kind    string
				Message *struct{ Seq int64 }
			}
			require.NoError(t, json.Unmarshal(b, &m))
			if m.Kind != "message" {
				break
			}
			keys = append(keys, [2]int64{e.ConversationID, m.Message.Seq})
		}
		if len(keys) > 0 {
			runs = append(runs, inbox.Announced{User: users[i], Epoch: p.Epoch, Head: p.Head, First: p.Entries[0].InboxSeq, Keys: keys})
			from = append(from, i)
		}
	}
	require.NotEmpty(t, runs)
	fresh := inbox.NewSharded(inbox.Servers{DBs: []inbox.Querier{w.Shards[0], w.Shards[1]},
		OfUser: ofUser, OfConversation: ofConv}, inbox.Config{})
	for _, r := range []*inbox.Reader{two, fresh} { // warm, then cold
		pages, ok := r.Resolve(ctx, runs)
		for j, p := range pages {
			require.True(t, ok[j], "run of user %d resolved", runs[j].User)
			want := got[from[j]].Entries[:len(runs[j].Keys)]
			wb, err := json.Marshal(want)
			require.NoError(t, err)
			gb, err := json.Marshal(p.Entries)
			require.NoError(t, err)
			require.JSONEq(t, string(wb), string(gb), "user %d's run", runs[j].User)
		}
	}

	wantLists, err := one.LargeLists(ctx, users)
	require.NoError(t, err)
	gotLists, err := two.LargeLists(ctx, users)
	require.NoError(t, err)
	require.Equal(t, wantLists, gotLists)
	t.Logf("%d users; %d message entries and %d records read across servers, %d with reactions, %d users with read-mode conversations",
		len(users), crossedMsgs, crossedRecs, reacted, large)
}
