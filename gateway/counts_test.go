package gateway

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
	"github.com/inboxd/inboxd/replay"
)

// The unread and mention counts, against a model: randomized sends (with mentions and @all), reads on several
// devices of one user, mutes, membership changes, edits and deletes, all
// through the API; then a replay of the log. After each phase every
// user's records carry the model's unread_count and mention_count, and
// the sync answer's totals are their sums (unread over records not muted).
// INBOXD_TEST_SEED=n repeats the choices of a run.

type cmMsg struct {
	sender     int64
	text       bool
	mentions   []int64
	mentionAll bool
	deleted    bool
}

type cmConv struct {
	id      int64
	msgs    []cmMsg         // index seq-1
	members map[int64]bool  // current
	read    map[int64]int64 // per user: read position (kept after removal)
	removed map[int64]bool
	muted   map[int64]bool
	joined  map[int64]int64 // current members: the seq their span began
}

func (c *cmConv) last() int64 { return int64(len(c.msgs)) }

// join, own send and read: the three ways the model's read position moves.
func (c *cmConv) moveRead(u, seq int64) { c.read[u] = max(c.read[u], min(seq, c.last())) }

func (c *cmConv) system(by int64) { c.msgs = append(c.msgs, cmMsg{sender: by}) }

// counts is the model's unread and mention counts of u.
func (c *cmConv) counts(u int64) (unread, mentions int64) {
	if !c.members[u] {
		return 0, 0
	}
	for seq := c.read[u] + 1; seq <= c.last(); seq++ {
		m := c.msgs[seq-1]
		if !m.text || m.deleted || m.sender == u {
			continue
		}
		unread++
		if m.mentionAll || slices.Contains(m.mentions, u) {
			mentions++
		}
	}
	return unread, mentions
}

func TestCountsRandomized(t *testing.T) {
	tg := newGateway(t, nil)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("INBOXD_TEST_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (INBOXD_TEST_SEED=%d repeats its choices)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 18))
	const nUsers = 6
	// Two devices per user (a token each): reads come from either.
	users, phones := make([]*user, nUsers+1), make([]*user, nUsers+1)
	for i := 1; i <= nUsers; i++ {
		users[i], phones[i] = tg.user(t, int64(1000+i)), tg.user(t, int64(1000+i))
	}
	uid := func(i int) int64 { return int64(1000 + i) }
	var convs []*cmConv
	for range 4 {
		creator := 1 + rng.IntN(nUsers)
		c := &cmConv{members: map[int64]bool{uid(creator): true}, read: map[int64]int64{}, removed: map[int64]bool{},
			muted: map[int64]bool{}, joined: map[int64]int64{}}
		others := []int64{}
		for i := 1; i <= nUsers; i++ {
			if i != creator && rng.IntN(2) == 0 {
				others = append(others, uid(i))
				c.members[uid(i)] = true
			}
		}
		c.id = users[creator].create(t, "c", others...)
		c.system(uid(creator))
		for m := range c.members {
			c.moveRead(m, 1)
			c.joined[m] = 1
		}
		convs = append(convs, c)
	}
	for op := range 260 {
		c := convs[rng.IntN(len(convs))]
		dev := users
		if rng.IntN(2) == 0 {
			dev = phones
		}
		cmOp(t, rng, dev, c, op)
	}
	checkCounts(t, users, convs, "after the workload")
	tg.verify(t)

	// A replay rebuilds the projections from the log: the same counts.
	tg.stopFanout()
	res, err := tg.env.Replay(context.Background(), replay.Config{Brokers: tg.env.Brokers, Topic: tg.env.Topic,
		Logger: tg.env.Logger, Progress: &bytes.Buffer{}})
	require.NoError(t, err)
	require.Positive(t, res.Records)
	tg.g.inbox.ForgetAll()
	checkCounts(t, users, convs, "after a replay")
	tg.verify(t)
}

// cmOp makes one random change to c through the API and to the model.
func cmOp(t *testing.T, rng *rand.Rand, users []*user, c *cmConv, op int) {
	t.Helper()
	var members []int64
	for m := range c.members {
		members = append(members, m)
	}
	slices.Sort(members)
	actor := members[rng.IntN(len(members))]
	u := users[actor-1000]
	path := fmt.Sprintf("/v1/conversations/%d", c.id)
	switch k := rng.IntN(20); {
	case k < 9: // a send, sometimes with mentions
		body := map[string]any{"msg_id": uuid.NewString(), "body": fmt.Sprintf("m%d", op)}
		var mentions []int64
		for _, m := range members {
			if m != actor && rng.IntN(3) == 0 {
				mentions = append(mentions, m)
			}
		}
		all := rng.IntN(12) == 0
		body["mentions"], body["mention_all"] = mentions, all
		r := u.do(t, "POST", path+"/messages", body)
		require.Equal(t, http.StatusCreated, r.status, "%s", r)
		var got protocol.Message
		r.decode(t, &got)
		require.Equal(t, c.last()+1, got.Seq)
		require.Equal(t, len(mentions), len(got.Mentions))
		c.msgs = append(c.msgs, cmMsg{sender: actor, text: true, mentions: mentions, mentionAll: all})
		c.moveRead(actor, got.Seq)
	case k < 13: // a read, by one of the user's devices (a token each)
		to := rng.Int64N(c.last() + 2)
		r := u.do(t, "POST", path+"/read", map[string]any{"seq": to})
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
		c.moveRead(actor, to)
	case k < 14: // mute or unmute
		c.muted[actor] = !c.muted[actor]
		r := u.do(t, "PATCH", path+"/record", map[string]any{"muted": c.muted[actor]})
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	case k < 16: // add someone
		add := int64(1001 + rng.IntN(len(users)-1))
		r := u.do(t, "POST", path+"/members", map[string]any{"user_id": add})
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
		if !c.members[add] {
			c.system(actor)
			c.members[add], c.removed[add] = true, false
			c.moveRead(add, c.last())
			c.joined[add] = c.last()
		}
	case k < 17: // remove someone (not the last member)
		if len(members) < 2 {
			return
		}
		rm := members[rng.IntN(len(members))]
		r := u.do(t, "DELETE", fmt.Sprintf("%s/members/%d", path, rm), nil)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
		c.system(actor)
		delete(c.members, rm)
		c.removed[rm] = true
	default: // edit or delete one of the actor's messages (of its current span)
		var own []int64
		for i, m := range c.msgs {
			if m.text && m.sender == actor && !m.deleted && int64(i+1) > c.joined[actor] {
				own = append(own, int64(i+1))
			}
		}
		if len(own) == 0 {
			return
		}
		seq := own[rng.IntN(len(own))]
		mp := fmt.Sprintf("%s/messages/%d", path, seq)
		if rng.IntN(2) == 0 {
			r := u.do(t, "PATCH", mp, map[string]any{"change_id": uuid.NewString(), "body": "edited"})
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			return
		}
		r := u.do(t, "DELETE", mp, map[string]any{"change_id": uuid.NewString()})
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		c.msgs[seq-1].deleted = true
	}
}

// checkCounts compares every user's records and totals with the model.
func checkCounts(t *testing.T, users []*user, convs []*cmConv, when string) {
	t.Helper()
	for _, u := range users[1:] {
		var wantUnread, wantMentions int64
		byConv := map[int64]*cmConv{}
		for _, c := range convs {
			byConv[c.id] = c
			un, mn := c.counts(u.id)
			if !c.muted[u.id] {
				wantUnread += un
			}
			wantMentions += mn
		}
		r := u.do(t, "GET", "/v1/conversations?limit=200", nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		var list protocol.ConversationList
		r.decode(t, &list)
		for _, rec := range list.Conversations {
			c := byConv[rec.ConversationID]
			un, mn := c.counts(u.id)
			require.Equal(t, un, rec.UnreadCount, "%s: user %d conversation %d unread (read_seq %d, model %d)",
				when, u.id, c.id, rec.ReadSeq, c.read[u.id])
			require.Equal(t, mn, rec.MentionCount, "%s: user %d conversation %d mentions", when, u.id, c.id)
			if c.members[u.id] {
				require.Equal(t, c.read[u.id], rec.ReadSeq, "%s: user %d conversation %d read_seq", when, u.id, c.id)
			}
		}
		s := u.sync(t, "after=0&limit=1")
		require.Equal(t, wantUnread, s.UnreadTotal, "%s: user %d unread_total", when, u.id)
		require.Equal(t, wantMentions, s.MentionTotal, "%s: user %d mention_total", when, u.id)
	}
}

// TestCountsNoInboxRows: reading (a receipt) writes one record entry for the
// reader only, and sends with mentions write one entry per member, as any
// send: counts add no inbox row.
func TestCountsNoInboxRows(t *testing.T) {
	tg := newGateway(t, nil)
	a, b, c := tg.user(t, 1), tg.user(t, 2), tg.user(t, 3)
	cid := a.create(t, "t", 2, 3)
	heads := func() [3]int64 { return [3]int64{a.head(t), b.head(t), c.head(t)} }
	before := heads()
	r := a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid),
		map[string]any{"msg_id": uuid.NewString(), "body": "hi @b", "mentions": []int64{2}})
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	after := heads()
	for i := range after {
		require.Equal(t, before[i]+1, after[i], "one message entry per member, user %d", i+1)
	}
	r = b.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/read", cid), map[string]any{"seq": 2})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	final := heads()
	require.Equal(t, [3]int64{after[0], after[1] + 1, after[2]}, final, "a read is a record entry of the reader only")
	waitFor(t, 5*time.Second, "counts", func() bool {
		s := b.sync(t, "after=0&limit=1")
		return s.UnreadTotal == 0 && s.MentionTotal == 0
	})
	s := c.sync(t, "after=0&limit=1")
	require.Equal(t, int64(1), s.UnreadTotal)
	require.Equal(t, int64(0), s.MentionTotal)
	// Again at the same head (the remembered totals), then after a mention.
	require.Equal(t, s.Counts, c.sync(t, "after=0&limit=1").Counts)
	r = a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid),
		map[string]any{"msg_id": uuid.NewString(), "body": "@all", "mention_all": true})
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	s = c.sync(t, "after=0&limit=1")
	require.Equal(t, protocol.Counts{UnreadTotal: 2, MentionTotal: 1}, s.Counts)
	require.Equal(t, s.Counts, c.sync(t, "after=0&limit=1").Counts)
	// A too-long answer (a stale epoch) carries the counts too: in its
	// records and as totals.
	tl := c.sync(t, "after=1&epoch=1")
	require.True(t, tl.TooLong)
	require.Equal(t, s.Counts, tl.Counts)
	require.Len(t, tl.Conversations, 1)
	require.Equal(t, int64(2), tl.Conversations[0].UnreadCount)
	require.Equal(t, int64(1), tl.Conversations[0].MentionCount)
}

// The send check counts mentioned members one id at a time and takes the
// member count for mention_all from the conversation (sqlSendCheck): a
// mention of a non-member (or a former member) is refused, a mention
// named twice too, and mention_all above MentionAllMax; nothing is
// appended for any of them.
func TestMentionChecks(t *testing.T) {
	tg := newGateway(t, func(c *Config) { c.MentionAllMax = 3 })
	a, b := tg.user(t, 1), tg.user(t, 2)
	small := a.create(t, "small", 2, 3)
	big := a.create(t, "big", 2, 3, 4)
	r := a.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/3", small), nil)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	waitFor(t, 10*time.Second, "3 removed", func() bool {
		var list protocol.MemberList
		r := a.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/members", small), nil)
		r.decode(t, &list)
		return len(list.Members) == 2
	})
	send := func(cid int64, body map[string]any) resp {
		body["msg_id"] = uuid.NewString()
		body["body"] = "hi"
		return a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid), body)
	}
	before := tg.snapshot(t)
	for _, bad := range []struct {
		cid  int64
		body map[string]any
	}{
		{small, map[string]any{"mentions": []int64{9}}},
		{small, map[string]any{"mentions": []int64{2, 3}}}, // 3 left
		{small, map[string]any{"mentions": []int64{2, 2}}},
		{big, map[string]any{"mention_all": true}}, // 4 members > 3
	} {
		r := send(bad.cid, bad.body)
		require.Equal(t, http.StatusBadRequest, r.status, "%v: %s", bad.body, r)
	}
	require.Equal(t, before, tg.snapshot(t), "nothing appended")
	r = send(small, map[string]any{"mentions": []int64{2}, "mention_all": true})
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	require.Equal(t, int64(1), b.sync(t, "after=0&limit=1").MentionTotal)
}

// mention_all to a conversation that does not exist is its 404, not a
// failed scan of the member count the send check reads (found by the
// fuzzer).
func TestMentionAllUnknownConversation(t *testing.T) {
	tg := newGateway(t, nil)
	a := tg.user(t, 1)
	r := a.do(t, "POST", "/v1/conversations/987654/messages",
		map[string]any{"msg_id": uuid.NewString(), "body": "@all", "mention_all": true})
	require.Equal(t, http.StatusNotFound, r.status, "%s", r)
}
