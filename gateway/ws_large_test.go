package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// helloLarge sends a hello that asks for the read-mode pushes and returns
// the welcome.
func (c *wsClient) helloLarge(t testing.TB, after int64) protocol.ServerFrame {
	t.Helper()
	c.writeJSON(t, protocol.Hello{Type: protocol.FrameHello, After: after, Large: true})
	f := c.next(t)
	require.Equal(t, protocol.FrameWelcome, f.Type)
	return f
}

// nextTyped reads frames until one of type typ (the entries, heartbeats
// and others in between are skipped).
func (c *wsClient) nextTyped(t testing.TB, typ string) protocol.ServerFrame {
	t.Helper()
	for {
		f := c.next(t)
		if f.Type == typ {
			return f
		}
	}
}

// nextTypedNot is nextTyped failing on a frame of type not on the way.
func (c *wsClient) nextTypedNot(t testing.TB, typ, not string) protocol.ServerFrame {
	t.Helper()
	for {
		f := c.next(t)
		require.NotEqual(t, not, f.Type, "a %s frame: %+v", not, f)
		if f.Type == typ {
			return f
		}
	}
}

// noneOf reads frames for d and fails on one of type typ. The connection
// is unusable after it (a read timed out).
func (c *wsClient) noneOf(t testing.TB, typ string, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		f, err := c.nextE(time.Until(end))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return
		}
		require.NoError(t, err)
		require.NotEqual(t, typ, f.Type, "a %s frame: %+v", typ, f)
	}
}

// A session whose hello said large gets its read-mode conversations in
// the welcome, then a messages frame per L token: the new messages in
// order, then the changed ones; a session without it gets none.
func TestWSLargeMessagesFrames(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{})
	tg := w.tgw
	a, b := tg.user(t, 1), tg.user(t, 2)
	big := a.create(t, "big", 2)
	setReadFanout(t, tg, big, true)
	seq0, _ := lastSeq(t, tg, big)

	ca := dialWS(t, w, a)
	welcome := ca.helloLarge(t, 0)
	require.Equal(t, []protocol.LargeConv{{ConversationID: big, LastSeq: seq0}}, welcome.Large)
	cb := dialWS(t, w, b)
	cb.hello(t, 0, nil)
	require.Equal(t, protocol.FrameWelcome, cb.next(t).Type)
	waitFor(t, 10*time.Second, "a indexed", func() bool { n, _ := w.ws.LargeSessions(big); return n == 1 })

	var sent []protocol.Message
	for i := range 3 {
		sent = append(sent, b.send(t, big, fmt.Sprint("m", i)))
	}
	last, _ := lastSeq(t, tg, big)
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Large(projection.Large{Conv: big, LastSeq: last}) })
	f := ca.nextTyped(t, protocol.FrameMessages)
	require.Equal(t, big, f.ConversationID)
	require.Equal(t, last, f.LastSeq)
	require.Equal(t, []int64{sent[0].Seq, sent[1].Seq, sent[2].Seq}, seqsOf(f.Messages))
	require.Equal(t, "m0", msgText(t, f.Messages[0]))
	require.Empty(t, f.Changed)

	// A change: the changed message, by changed_ord, and no new ones. A
	// repeated token pushes nothing more.
	setChanged(t, tg, big, sent[1].Seq, 1)
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Large(projection.Large{Conv: big, LastSeq: last, Changes: 1}) })
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Large(projection.Large{Conv: big, LastSeq: last, Changes: 1}) })
	f = ca.nextTyped(t, protocol.FrameMessages)
	require.EqualValues(t, 1, f.ChangeCount)
	require.Empty(t, f.Messages)
	require.Equal(t, []int64{sent[1].Seq}, seqsOf(f.Changed))
	require.EqualValues(t, 1, f.Changed[0].ChangedOrd)

	more := b.send(t, big, "m3")
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Large(projection.Large{Conv: big, LastSeq: more.Seq, Changes: 1}) })
	f = ca.nextTyped(t, protocol.FrameMessages)
	require.Equal(t, []int64{more.Seq}, seqsOf(f.Messages), "only what is new since the last frame")

	cb.noneOf(t, protocol.FrameMessages, 500*time.Millisecond)
	ca.noneOf(t, protocol.FrameMessages, 300*time.Millisecond)

	// The session ends: the index forgets it.
	_ = ca.conn.Close()
	waitFor(t, 10*time.Second, "index emptied", func() bool { _, ok := w.ws.LargeSessions(big); return !ok })
}

// The index follows the memberships: an M token of a local user re-reads
// its list (a large frame; the next L token reaches it), an S token
// re-reads its members' lists, a leave drops it from the conversation.
func TestWSLargeIndexMembership(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{})
	tg := w.tgw
	a, b := tg.user(t, 1), tg.user(t, 2)
	y := b.create(t, "y")
	setReadFanout(t, tg, y, true)
	z := a.create(t, "z", 2)

	ca := dialWS(t, w, a)
	welcome := ca.helloLarge(t, 0)
	require.Empty(t, welcome.Large)
	_, indexed := w.ws.LargeSessions(y)
	require.False(t, indexed)

	// a joins y.
	require.Equal(t, http.StatusAccepted, b.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", y), map[string]any{"user_id": 1}).status)
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Member(projection.Membership{Conv: y, User: 1, Joined: true}) })
	f := ca.nextTyped(t, protocol.FrameLarge)
	ys, _ := lastSeq(t, tg, y)
	require.Equal(t, []protocol.LargeConv{{ConversationID: y, LastSeq: ys}}, f.Large)
	n, _ := w.ws.LargeSessions(y)
	require.Equal(t, 1, n)
	m := b.send(t, y, "to the new member")
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Large(projection.Large{Conv: y, LastSeq: m.Seq}) })
	f = ca.nextTyped(t, protocol.FrameMessages)
	require.Equal(t, []int64{m.Seq}, seqsOf(f.Messages))

	// z switches to read mode.
	setReadFanout(t, tg, z, true)
	zs, _ := lastSeq(t, tg, z)
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Mode(projection.Mode{Conv: z, From: zs + 1, Read: true}) })
	f = ca.nextTyped(t, protocol.FrameLarge)
	require.Equal(t, []protocol.LargeConv{{ConversationID: y, LastSeq: m.Seq}, {ConversationID: z, LastSeq: zs}}, f.Large)
	n, _ = w.ws.LargeSessions(z)
	require.Equal(t, 1, n)

	// a leaves y: out of the index, no frame of y any more.
	require.Equal(t, http.StatusAccepted, a.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/1", y), nil).status)
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Member(projection.Membership{Conv: y, User: 1, Joined: false}) })
	f = ca.nextTyped(t, protocol.FrameLarge)
	require.Equal(t, []protocol.LargeConv{{ConversationID: z, LastSeq: zs}}, f.Large)
	_, indexed = w.ws.LargeSessions(y)
	require.False(t, indexed)
	m = b.send(t, y, "after a left")
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Large(projection.Large{Conv: y, LastSeq: m.Seq}) })

	// z switches back: the list empties (and nothing of y came before).
	time.Sleep(200 * time.Millisecond)
	setReadFanout(t, tg, z, false)
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Mode(projection.Mode{Conv: z, From: zs + 5, Read: false}) })
	f = ca.nextTypedNot(t, protocol.FrameLarge, protocol.FrameMessages)
	require.Empty(t, f.Large)
	_, indexed = w.ws.LargeSessions(z)
	require.False(t, indexed)
}

// A member who joined after the index's position never gets the messages
// before its join.
func TestWSLargeJoinedLaterSeesFromJoin(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{})
	tg := w.tgw
	a, c := tg.user(t, 1), tg.user(t, 3)
	big := a.create(t, "big")
	setReadFanout(t, tg, big, true)
	ca := dialWS(t, w, a)
	ca.helloLarge(t, 0)
	waitFor(t, 10*time.Second, "a indexed", func() bool { n, _ := w.ws.LargeSessions(big); return n == 1 })
	early := a.send(t, big, "before c")
	require.Equal(t, http.StatusAccepted, a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", big), map[string]any{"user_id": 3}).status)
	cc := dialWS(t, w, c)
	welcome := cc.helloLarge(t, 0)
	require.Len(t, welcome.Large, 1)
	waitFor(t, 10*time.Second, "c indexed", func() bool { n, _ := w.ws.LargeSessions(big); return n == 2 })
	late := a.send(t, big, "after c")
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Large(projection.Large{Conv: big, LastSeq: late.Seq}) })
	fa := ca.nextTyped(t, protocol.FrameMessages)
	require.Equal(t, early.Seq, fa.Messages[0].Seq)
	require.Equal(t, late.Seq, fa.Messages[len(fa.Messages)-1].Seq)
	fc := cc.nextTyped(t, protocol.FrameMessages)
	require.NotEmpty(t, fc.Messages)
	for _, m := range fc.Messages {
		require.Greater(t, m.Seq, early.Seq, "c was not a member yet")
	}
	require.Equal(t, late.Seq, fc.Messages[len(fc.Messages)-1].Seq)
}

// Notifications lost with the LISTEN connection: once it is back, every
// aware session gets its list again (with the positions moved meanwhile)
// and the index goes on from them.
func TestWSLargeAfterListenLost(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{})
	tg := w.tgw
	a := tg.user(t, 1)
	big := a.create(t, "big")
	setReadFanout(t, tg, big, true)
	ca := dialWS(t, w, a)
	ca.helloLarge(t, 0)
	waitFor(t, 10*time.Second, "a indexed", func() bool { n, _ := w.ws.LargeSessions(big); return n == 1 })

	var killed int
	require.NoError(t, tg.env.Pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'inboxd-gateway-listen' AND datname = current_database()`).Scan(&killed))
	require.Equal(t, 1, killed)
	// Moved while nobody listened (or before the hub noticed): its L token
	// may be lost.
	_, err := tg.env.Pool.Exec(context.Background(), `UPDATE conversations SET last_seq = last_seq + 1 WHERE id = $1`, big)
	require.NoError(t, err)
	seq, _ := lastSeq(t, tg, big)
	waitFor(t, 30*time.Second, "the hub to reconnect", func() bool { return tg.g.hub.Connected() })
	for {
		f := ca.nextTyped(t, protocol.FrameLarge)
		if len(f.Large) == 1 && f.Large[0].LastSeq == seq {
			break
		}
	}
	m := a.send(t, big, "after the outage")
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Large(projection.Large{Conv: big, LastSeq: m.Seq}) })
	f := ca.nextTyped(t, protocol.FrameMessages)
	require.Equal(t, m.Seq, f.Messages[len(f.Messages)-1].Seq)
}
