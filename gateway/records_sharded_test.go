package gateway

import (
	"context"
	"math"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/internal/servers"
	"github.com/inboxd/inboxd/internal/shardtest"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/protocol"
)

// TestShardedReadsMatchOne: the same log projected on one server and on
// two (internal/shardtest's world); every user's conversation list read
// across the two servers, page by page through the keyset tokens and by
// page number, is the list one server gives, record for record (but for
// the versions, which count the user's record changes in each server's
// own interleaving: they are the user's server's, and the since_version
// list is in their order and holds the same records); and so are the
// histories of every conversation for every member.
func TestShardedReadsMatchOne(t *testing.T) {
	w := shardtest.NewWorld(t, 44)
	g := workload.New(workload.Config{Seed: 44, Users: 50, Conversations: 30, MaxMembers: 14, PinPct: 4, ReadPct: 8,
		EditPct: 2, DeletePct: 1, ReactPct: 3, ReplyPct: 2})
	w.Run(g, 3, 900)
	ctx := context.Background()
	two := &servers.Servers{Pools: w.Shards[:], OfUser: w.OfUser, OfConv: w.OfConv}
	one := servers.One(w.One)

	var users []int64
	require.NoError(t, pgxScanAll(ctx, w.One, `SELECT id FROM users ORDER BY id`, &users))
	require.NotEmpty(t, users)

	// all pages through the tokens, or by page number.
	pages := func(srv *servers.Servers, user int64, p listParams, numbered bool) []protocol.Record {
		var out []protocol.Record
		for n := int64(1); ; n++ {
			if numbered {
				p.page = &pageToken{number: n}
			}
			recs, next, err := listRecords(ctx, srv, user, p)
			require.NoError(t, err)
			out = append(out, recs...)
			if next == nil {
				return out
			}
			require.LessOrEqual(t, n, int64(100), "pages end")
			if !numbered {
				p.page, err = parsePageToken(*next)
				require.NoError(t, err)
			}
		}
	}
	unversioned := func(recs []protocol.Record) []protocol.Record {
		out := make([]protocol.Record, len(recs))
		for i, r := range recs {
			r.Version = 0
			out[i] = r
		}
		return out
	}
	crossed, pinned := 0, 0
	for _, u := range users {
		want := pages(one, u, listParams{limit: 4}, false)
		got := pages(two, u, listParams{limit: 4}, false)
		require.NotEmpty(t, want, "user %d has conversations", u)
		require.Equal(t, unversioned(want), unversioned(got), "user %d's list", u)
		require.Equal(t, unversioned(want), unversioned(pages(two, u, listParams{limit: 3}, true)), "user %d's list by page number", u)
		stored := map[int64]int64{}
		require.NoError(t, scanVersions(ctx, w.Shards[two.OfUser(u)], u, stored))
		for _, r := range got {
			require.Equal(t, stored[r.ConversationID], r.Version, "user %d's record of %d: its server's version", u, r.ConversationID)
			if two.OfConv(r.ConversationID) != two.OfUser(u) {
				crossed++
			}
			if r.Pinned {
				pinned++
			}
		}
		since := pages(two, u, listParams{limit: 5, hasSince: true}, false)
		require.ElementsMatch(t, got, since, "user %d's since_version list holds the same records", u)
		require.IsIncreasing(t, versionsOf(since), "user %d's since_version list is in version order", u)
		if len(since) > 2 {
			mid := since[len(since)/2].Version
			later := pages(two, u, listParams{limit: 2, hasSince: true, sinceVersion: mid}, false)
			require.Equal(t, since[len(since)/2+1:], later, "user %d's records after version %d", u, mid)
		}
	}
	// History, read on the conversation's server, with the reader's own
	// reactions marked, as on one server; so are the membership checks.
	g1, g2 := &Gateway{srv: one, blocks: newBlockCache(one)}, &Gateway{srv: two, blocks: newBlockCache(two)}
	histories := 0
	for _, u := range users {
		for _, r := range pages(one, u, listParams{limit: 100}, false) {
			c := r.ConversationID
			for _, q := range []struct {
				mode historyMode
				pos  int64
			}{{historyBefore, math.MaxInt64}, {historyAfter, 0}, {historyChanged, 0}, {historyBefore, r.LastSeq / 2}} {
				want, wantMore, err := g1.history(ctx, u, c, q.mode, q.pos, 40)
				require.NoError(t, err)
				got, gotMore, err := g2.history(ctx, u, c, q.mode, q.pos, 40)
				require.NoError(t, err)
				require.Equal(t, want, got, "user %d's history of %d (%v after %d)", u, c, q.mode, q.pos)
				require.Equal(t, wantMore, gotMore)
				histories++
			}
			require.Equal(t, g1.requireMember(ctx, u, c), g2.requireMember(ctx, u, c), "user %d in %d", u, c)
		}
	}
	// Receipts: read positions from the conversation's server, the
	// settings (a third of the users hide theirs) from the catalog.
	var hide []int64
	for _, u := range users {
		if u%3 == 0 {
			hide = append(hide, u)
		}
	}
	for _, db := range []*pgxpool.Pool{w.One, w.Shards[0]} {
		_, err := db.Exec(ctx, `INSERT INTO user_settings (user_id, hide_receipts) SELECT unnest($1::bigint[]), true`, hide)
		require.NoError(t, err)
	}
	g1.pool, g2.pool = w.One, w.Shards[0]
	receipts := func(g *Gateway, cid, caller, limit int64) []protocol.Receipt {
		var out []protocol.Receipt
		pg := &memberPage{cid: cid, limit: limit}
		for n := 0; ; n++ {
			page, err := g.receiptsPage(ctx, pg, caller)
			require.NoError(t, err)
			page, next := cut(pg, page)
			out = append(out, page...)
			if next == nil {
				return out
			}
			require.Less(t, n, 1000)
			pg = &memberPage{cid: cid, limit: limit, after: pg.last[limit-1]}
		}
	}
	receiptPages, hiding := 0, 0
	for _, u := range users[:10] {
		for _, r := range pages(one, u, listParams{limit: 100}, false) {
			if r.Removed {
				continue
			}
			want := receipts(g1, r.ConversationID, u, 3)
			require.Equal(t, want, receipts(g2, r.ConversationID, u, 3), "receipts of %d for %d", r.ConversationID, u)
			receiptPages++
			for _, rc := range want {
				if rc.UserID%3 == 0 && rc.UserID == u {
					hiding++ // the caller sees its own
				}
			}
		}
	}
	require.Positive(t, receiptPages)
	require.Positive(t, hiding, "a caller who hides its receipts sees its own")
	_, _, err := g2.history(ctx, users[0], 1<<40, historyBefore, math.MaxInt64, 10)
	require.ErrorContains(t, err, "does not exist")
	require.Positive(t, crossed, "records of conversations on the other server")
	require.Positive(t, pinned, "pinned records, listed first")
	t.Logf("%d users' lists, %d records of the other server's conversations, %d pinned; %d history pages; %d receipt lists",
		len(users), crossed, pinned, histories, receiptPages)
}

func versionsOf(recs []protocol.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Version
	}
	return out
}

// scanVersions reads the versions of user's records on db into out.
func scanVersions(ctx context.Context, db *pgxpool.Pool, user int64, out map[int64]int64) error {
	rs, err := db.Query(ctx, `SELECT conversation_id, version FROM records WHERE user_id = $1`, user)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		var c, v int64
		if err := rs.Scan(&c, &v); err != nil {
			return err
		}
		out[c] = v
	}
	return rs.Err()
}

// pgxScanAll reads one bigint column of sql on db into out.
func pgxScanAll(ctx context.Context, db *pgxpool.Pool, sql string, out *[]int64) error {
	rs, err := db.Query(ctx, sql)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		var v int64
		if err := rs.Scan(&v); err != nil {
			return err
		}
		*out = append(*out, v)
	}
	return rs.Err()
}
