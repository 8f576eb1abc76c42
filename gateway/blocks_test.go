package gateway

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/apikey"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/protocol"
)

// blocks is GET /v1/blocks?query by u.
func (u *user) blocks(t testing.TB, query string) protocol.BlockList {
	t.Helper()
	r := u.do(t, "GET", "/v1/blocks?"+query, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var out protocol.BlockList
	r.decode(t, &out)
	return out
}

// blockedIDs is the user ids of u's blocks, read whole.
func (u *user) blockedIDs(t testing.TB) []int64 {
	t.Helper()
	ids := []int64{}
	for _, b := range u.blocks(t, "").Blocks {
		ids = append(ids, b.UserID)
	}
	return ids
}

// waitBlocks waits until u's blocks are want (the projection is
// asynchronous; each read also refreshes the gateway's copy).
func (u *user) waitBlocks(t testing.TB, want ...int64) {
	t.Helper()
	if want == nil {
		want = []int64{}
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("blocks of %d are %v", u.id, want), func() bool {
		got := u.blockedIDs(t)
		return fmt.Sprint(got) == fmt.Sprint(want)
	})
}

// messageEntry is the message entry of conv's seq among entries.
func messageEntry(t testing.TB, entries []protocol.Entry, conv, seq int64) *protocol.Message {
	t.Helper()
	for _, e := range entries {
		if e.Kind == protocol.KindMessage && e.ConversationID == conv && e.Message.Seq == seq {
			return e.Message
		}
	}
	t.Fatalf("no entry of %d/%d among %d", conv, seq, len(entries))
	return nil
}

// historyMessage is seq of cid in u's history.
func historyMessage(t testing.TB, u *user, cid, seq int64) protocol.Message {
	t.Helper()
	h := u.history(t, cid, fmt.Sprintf("after=%d&limit=1", seq-1))
	require.Len(t, h.Messages, 1)
	return h.Messages[0]
}

// TestBlockRoutes: blocking is idempotent (204 once it stands), nobody
// blocks itself, the list pages by user id, and unblocking empties it.
func TestBlockRoutes(t *testing.T) {
	tg := newGateway(t, serverTestConfig)
	b := tg.user(t, 1)
	svc, _ := tg.service(t, "support", apikey.ScopeRead)
	r := b.do(t, "PUT", "/v1/blocks/1", nil)
	require.Equal(t, http.StatusBadRequest, r.status, "itself: %s", r)
	r = b.do(t, "DELETE", "/v1/blocks/2", nil)
	require.Equal(t, http.StatusNoContent, r.status, "not blocked: %s", r)
	for _, id := range []int64{9, 2, 5} {
		r = b.do(t, "PUT", fmt.Sprintf("/v1/blocks/%d", id), nil)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	}
	b.waitBlocks(t, 2, 5, 9)
	first := b.blocks(t, "limit=2")
	require.Len(t, first.Blocks, 2)
	require.Equal(t, int64(2), first.Blocks[0].UserID)
	require.False(t, first.Blocks[0].At.IsZero())
	require.NotNil(t, first.NextPage)
	rest := b.blocks(t, "limit=2&page="+*first.NextPage)
	require.Equal(t, []protocol.Block{{UserID: 9, At: rest.Blocks[0].At}}, rest.Blocks)
	require.Nil(t, rest.NextPage)

	// The server API lists them the same.
	r = svc.do(t, "GET", "/v1/server/users/1/blocks?limit=2", nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var server protocol.BlockList
	r.decode(t, &server)
	require.Equal(t, first, server)

	// Blocking again answers 204 and keeps the row and its time.
	r = b.do(t, "PUT", "/v1/blocks/2", nil)
	require.Equal(t, http.StatusNoContent, r.status, "%s", r)
	require.Equal(t, first.Blocks[0], b.blocks(t, "limit=1").Blocks[0])
	var rows int
	require.NoError(t, tg.env.UserPool(1).QueryRow(context.Background(),
		`SELECT count(*) FROM blocks WHERE blocker_id = 1`).Scan(&rows))
	require.Equal(t, 3, rows, "on the blocker's server")

	for _, id := range []int64{2, 5, 9} {
		r = b.do(t, "DELETE", fmt.Sprintf("/v1/blocks/%d", id), nil)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	}
	b.waitBlocks(t)
	tg.verify(t)
}

// TestBlockEffects: B (1) blocks X (2) in a group with C (6; 6 and 2 share
// a delivery worker of the ephemeral service, so C's frames are a
// positive control that X's, handled before them, were decided). X's
// message reaches B's sync, history and WebSocket marked and emptied, in
// its place, and C whole; X's typing, presence and receipts reach C but
// not B; X may neither start a conversation with B nor add B. Unblocking
// reveals the message and lets X add B.
func TestBlockEffects(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	w := newWSGatewayOn(t, env, ephemeralOpts())
	b, x, c := w.user(t, 1), w.user(t, 2), w.user(t, 6)
	cid := b.create(t, "group", 2, 6)
	sB, sC := connect(t, w, b), connect(t, w, c)
	sB.waitEphemeral(t, "C online, to B", presenceOf(6, true))

	r := b.do(t, "PUT", "/v1/blocks/2", nil)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	b.waitBlocks(t, 2)

	// X comes online, types, sends and reads; then C does the same, which
	// B must see (the control).
	sX := connect(t, w, x)
	sC.waitEphemeral(t, "X online, to C", presenceOf(2, true))
	sX.c.writeJSON(t, protocol.Typing{Type: protocol.FrameTyping, ConversationID: cid})
	sC.waitEphemeral(t, "X typing, to C", func(f protocol.ServerFrame) bool { return f.Type == protocol.FrameTyping && f.UserID == 2 })
	hello := c.send(t, cid, "hello")
	r = x.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/read", cid), map[string]any{"seq": hello.Seq})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	sent := x.send(t, cid, "secret")
	sC.waitOther(t, func(f protocol.ServerFrame) bool { return f.Type == protocol.FrameReceipt && f.UserID == 2 })

	sC.c.writeJSON(t, protocol.Typing{Type: protocol.FrameTyping, ConversationID: cid})
	sB.waitEphemeral(t, "C typing, to B", func(f protocol.ServerFrame) bool { return f.Type == protocol.FrameTyping && f.UserID == 6 })
	r = c.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/read", cid), map[string]any{"seq": sent.Seq})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	sB.waitOther(t, func(f protocol.ServerFrame) bool { return f.Type == protocol.FrameReceipt && f.UserID == 6 })
	for _, f := range sB.ephemeralFrames() {
		require.NotEqual(t, int64(2), f.UserID, "B got X's %s frame", f.Type)
	}
	sB.mu.Lock()
	for _, f := range sB.others {
		require.False(t, f.Type == protocol.FrameReceipt && f.UserID == 2, "B got X's receipt")
	}
	sB.mu.Unlock()
	require.Equal(t, []protocol.Presence{{UserID: 6, Online: true}}, b.lookup(t, 2, 6), "GET /v1/presence leaves X out for B")
	require.Len(t, c.lookup(t, 2, 6), 2, "and shows it to C")
	receipts := func(u *user) (ids []int64) {
		var list protocol.ReceiptList
		u.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/receipts", cid), nil).decode(t, &list)
		for _, rc := range list.Receipts {
			ids = append(ids, rc.UserID)
		}
		return ids
	}
	require.Equal(t, []int64{1, 6}, receipts(b))
	require.Equal(t, []int64{1, 2, 6}, receipts(c))

	// The message: pushed and synced to B marked and empty, in its place.
	headB, headC := b.head(t), c.head(t)
	sB.waitCursor(t, headB)
	sC.waitCursor(t, headC)
	_, pushedB := sB.state()
	_, pushedC := sC.state()
	requireContiguous(t, pushedB[0].InboxSeq-1, pushedB)
	for name, m := range map[string]*protocol.Message{
		"B's push": messageEntry(t, pushedB, cid, sent.Seq),
		"B's sync": messageEntry(t, b.sync(t, "after=0").Entries, cid, sent.Seq),
	} {
		require.True(t, m.SenderBlocked, name)
		require.JSONEq(t, `""`, string(m.Body), name)
		require.Equal(t, int64(2), m.SenderID, name)
	}
	syncB, _, _ := b.syncAll(t, 0, 100)
	requireContiguous(t, 0, syncB)
	hB := historyMessage(t, b, cid, sent.Seq)
	require.True(t, hB.SenderBlocked)
	require.JSONEq(t, `""`, string(hB.Body))
	for name, m := range map[string]protocol.Message{
		"C's push":    *messageEntry(t, pushedC, cid, sent.Seq),
		"C's sync":    *messageEntry(t, c.sync(t, "after=0").Entries, cid, sent.Seq),
		"C's history": historyMessage(t, c, cid, sent.Seq),
	} {
		require.False(t, m.SenderBlocked, name)
		require.Equal(t, "secret", msgText(t, &m), name)
	}

	// The conversation list carries the last message: masked for B too.
	lastOf := func(u *user) *protocol.Message {
		var l protocol.ConversationList
		r := u.do(t, "GET", "/v1/conversations", nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		r.decode(t, &l)
		for _, rec := range l.Conversations {
			if rec.ConversationID == cid {
				return rec.LastMessage
			}
		}
		t.Fatalf("no record of %d", cid)
		return nil
	}
	require.True(t, lastOf(b).SenderBlocked)
	require.JSONEq(t, `""`, string(lastOf(b).Body))
	require.Equal(t, "secret", msgText(t, lastOf(c)))

	// X may not start a conversation with B, nor add B to one.
	r = x.do(t, "POST", "/v1/conversations", map[string]any{"title": "dm", "members": []int64{1}})
	require.Equal(t, http.StatusForbidden, r.status, "%s", r)
	require.Equal(t, "forbidden", errCode(t, r))
	xc := x.create(t, "x's", 6)
	r = x.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", xc), `{"user_ids": [7, 1]}`)
	require.Equal(t, http.StatusForbidden, r.status, "%s", r)
	// B may still add X: the block binds the blocked user.
	bc := b.create(t, "b's", 6)
	r = b.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", bc), `{"user_id": 2}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)

	// Unblocking reveals the history and lets X add B.
	r = b.do(t, "DELETE", "/v1/blocks/2", nil)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	b.waitBlocks(t)
	hB = historyMessage(t, b, cid, sent.Seq)
	require.False(t, hB.SenderBlocked)
	require.Equal(t, "secret", msgText(t, &hB))
	m := messageEntry(t, b.sync(t, "after=0").Entries, cid, sent.Seq)
	require.Equal(t, "secret", msgText(t, m))
	r = x.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", xc), `{"user_id": 1}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	w.verify(t)
}
