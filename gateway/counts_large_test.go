package gateway

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// The totals of a sync answer are those of the state at its head, and a
// read-mode conversation moves without the head: a message that does not
// mention a member, or a delete, writes no inbox entry for them. A sync at
// the same head must count again (not answer the totals remembered for
// that head), over HTTP, with If-None-Match, and in the WebSocket welcome,
// and agree with the conversation list's unread_count.
func TestTotalsFollowReadModeConversations(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{})
	a, b := w.user(t, 101), w.user(t, 102)
	r := a.do(t, "POST", "/v1/conversations", map[string]any{"title": "channel", "members": []int64{102}, "channel": true})
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	var created protocol.ConversationCreated
	r.decode(t, &created)
	ch := created.ConversationID
	a.send(t, ch, "one")
	second := a.send(t, ch, "two")

	listUnread := func() int64 {
		t.Helper()
		r := b.do(t, "GET", "/v1/conversations", nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		var l protocol.ConversationList
		r.decode(t, &l)
		var n int64
		for _, rec := range l.Conversations {
			n += rec.UnreadCount
		}
		return n
	}
	s := b.sync(t, "after=0")
	require.Equal(t, int64(2), s.UnreadTotal, "%+v", s)
	require.Len(t, s.Large, 1)
	head := s.Head
	at := fmt.Sprintf("after=%d", head)
	require.Equal(t, int64(2), b.sync(t, at).UnreadTotal) // the remembered totals
	tag := b.do(t, "GET", "/v1/sync?"+at, nil).header.Get("ETag")

	// A plain message: b's head stays, its totals move.
	a.send(t, ch, "three")
	for i := range 2 { // the first counts again, the second reads the new remembered totals
		s = b.sync(t, at)
		require.Equal(t, head, s.Head, "read mode wrote an entry for b")
		require.Equal(t, int64(3), s.UnreadTotal, "sync %d at the same head", i+1)
	}
	require.Equal(t, int64(3), listUnread())
	r = b.do(t, "GET", "/v1/sync?"+at, nil, "If-None-Match", tag)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var s2 protocol.SyncAnswer
	r.decode(t, &s2)
	require.Equal(t, int64(3), s2.UnreadTotal)

	c := dialWS(t, w, b)
	c.hello(t, head, &s.Epoch)
	f := c.nextOf(t)
	require.Equal(t, protocol.FrameWelcome, f.Type)
	require.Equal(t, head, f.Head)
	require.Equal(t, int64(3), f.UnreadTotal, "welcome")
	_ = c.conn.Close()

	// A delete moves the change count, not b's head: one unread fewer.
	a.change(t, "DELETE", msgPath(ch, second.Seq), map[string]any{"change_id": uuid.NewString()}, http.StatusOK)
	s = b.sync(t, at)
	require.Equal(t, head, s.Head)
	require.Equal(t, int64(2), s.UnreadTotal, "after the delete")
	require.Equal(t, int64(2), listUnread())
	c = dialWS(t, w, b)
	c.hello(t, head, &s.Epoch)
	f = c.nextOf(t)
	require.Equal(t, protocol.FrameWelcome, f.Type)
	require.Equal(t, int64(2), f.UnreadTotal, "welcome after the delete")
}
