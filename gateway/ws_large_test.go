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

// gather reads messages frames until one at or past lastSeq and
// changeCount, and returns their new and changed messages in order of
// arrival; each new seq must come once, ascending (the projector's own L
// tokens and a test's may both push: a repeat must push nothing).
func (c *wsClient) gather(t testing.TB, conv, lastSeq, changeCount int64) (msgs, changed []protocol.Message) {
	t.Helper()
	for {
		f := c.nextTyped(t, protocol.FrameMessages)
		if f.ConversationID != conv {
			continue
		}
		for _, m := range f.Messages {
			if len(msgs) > 0 {
				require.Greater(t, m.Seq, msgs[len(msgs)-1].Seq, "pushed once, ascending")
			}
			msgs = append(msgs, m)
		}
		changed = append(changed, f.Changed...)
		if f.LastSeq >= lastSeq && f.ChangeCount >= changeCount {
			return msgs, changed
		}
	}
}

// largeUntil reads large frames until one whose list satisfies ok; a
// messages frame of conversation not (0: none) fails it.
func (c *wsClient) largeUntil(t testing.TB, not int64, ok func([]protocol.LargeConv) bool) []protocol.LargeConv {
	t.Helper()
	for {
		f := c.next(t)
		if f.Type == protocol.FrameMessages {
			require.NotEqual(t, not, f.ConversationID, "a messages frame of %d: %+v", not, f)
		}
		if f.Type == protocol.FrameLarge && ok(f.Large) {
			return f.Large
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
	// The projector's L tokens push them; one more (a repeat) pushes nothing.
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Large(projection.Large{Conv: big, LastSeq: last}) })
	msgs, changed := ca.gather(t, big, last, 0)
	require.Equal(t, []int64{sent[0].Seq, sent[1].Seq, sent[2].Seq}, seqsOf(msgs))
	require.Equal(t, "m0", msgText(t, msgs[0]))
	require.Empty(t, changed)

	// A change: the changed message, by changed_ord, and no new ones. A
	// repeated token pushes nothing more.
	setChanged(t, tg, big, sent[1].Seq, 1)
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Large(projection.Large{Conv: big, LastSeq: last, Changes: 1}) })
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Large(projection.Large{Conv: big, LastSeq: last, Changes: 1}) })
	msgs, changed = ca.gather(t, big, last, 1)
	require.Empty(t, msgs)
	require.Equal(t, []int64{sent[1].Seq}, seqsOf(changed))
	require.EqualValues(t, 1, changed[0].ChangedOrd)

	more := b.send(t, big, "m3")
	msgs, _ = ca.gather(t, big, more.Seq, 1)
	require.Equal(t, []int64{more.Seq}, seqsOf(msgs), "only what is new since the last frame")

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

	// a joins y: the projector's M token re-reads a's list.
	require.Equal(t, http.StatusAccepted, b.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", y), map[string]any{"user_id": 1}).status)
	ys, _ := lastSeq(t, tg, y)
	ca.largeUntil(t, 0, func(l []protocol.LargeConv) bool {
		return len(l) == 1 && l[0] == protocol.LargeConv{ConversationID: y, LastSeq: ys}
	})
	waitFor(t, 10*time.Second, "a indexed in y", func() bool { n, _ := w.ws.LargeSessions(y); return n == 1 })
	m := b.send(t, y, "to the new member")
	msgs, _ := ca.gather(t, y, m.Seq, 0)
	require.Equal(t, m.Seq, msgs[len(msgs)-1].Seq)

	// z switches to read mode (set by the test, with its S token).
	setReadFanout(t, tg, z, true)
	zs, _ := lastSeq(t, tg, z)
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Mode(projection.Mode{Conv: z, From: zs + 1, Read: true}) })
	ca.largeUntil(t, 0, func(l []protocol.LargeConv) bool {
		return len(l) == 2 && l[1] == protocol.LargeConv{ConversationID: z, LastSeq: zs}
	})
	waitFor(t, 10*time.Second, "a indexed in z", func() bool { n, _ := w.ws.LargeSessions(z); return n == 1 })

	// a leaves y: out of the index, no frame of y any more.
	require.Equal(t, http.StatusAccepted, a.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/1", y), nil).status)
	ca.largeUntil(t, 0, func(l []protocol.LargeConv) bool {
		return len(l) == 1 && l[0] == protocol.LargeConv{ConversationID: z, LastSeq: zs}
	})
	waitFor(t, 10*time.Second, "a out of y's index", func() bool { _, ok := w.ws.LargeSessions(y); return !ok })
	b.send(t, y, "after a left")

	// z switches back: the list empties (and nothing of y came before).
	setReadFanout(t, tg, z, false)
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Mode(projection.Mode{Conv: z, From: zs + 5, Read: false}) })
	ca.largeUntil(t, y, func(l []protocol.LargeConv) bool { return len(l) == 0 })
	waitFor(t, 10*time.Second, "z's index gone", func() bool { _, ok := w.ws.LargeSessions(z); return !ok })
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
	fa, _ := ca.gather(t, big, late.Seq, 0)
	require.Equal(t, early.Seq, fa[0].Seq)
	require.Equal(t, late.Seq, fa[len(fa)-1].Seq)
	fc, _ := cc.gather(t, big, late.Seq, 0)
	require.NotEmpty(t, fc)
	for _, m := range fc {
		require.Greater(t, m.Seq, early.Seq, "c was not a member yet")
	}
	require.Equal(t, late.Seq, fc[len(fc)-1].Seq)
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
	// The list read again at registration (largeIndex.add) comes first:
	// taken here, it cannot be mistaken below for the reset's, which sets
	// the positions. (Late on a loaded machine, it reported the moved seq
	// before the reset had run; the reset then came after the send, took
	// its position from the list, and the send's frame was never pushed:
	// the client reads such a gap with ?after=.)
	require.Equal(t, protocol.FrameLarge, ca.nextTyped(t, protocol.FrameLarge).Type)

	killed := 0
	for _, pool := range tg.env.Pools { // one LISTEN connection per server
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'inboxd-gateway-listen' AND datname = current_database()`).Scan(&n))
		killed += n
	}
	require.Equal(t, len(tg.env.Pools), killed)
	// Moved while nobody listened (or before the hub noticed): its L token
	// may be lost.
	_, err := tg.env.ConvPool(big).Exec(context.Background(), `UPDATE conversations SET last_seq = last_seq + 1 WHERE id = $1`, big)
	require.NoError(t, err)
	tg.env.Poked()
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

// LargePushRate paces a conversation's pushes: with one session here and
// a rate of 2 writes/s, a frame at most every 500ms, the messages sent in
// between in the next one, every seq once and in order.
func TestWSLargePushPaced(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{LargePushRate: 2})
	tg := w.tgw
	a, b := tg.user(t, 1), tg.user(t, 2)
	big := a.create(t, "big", 2)
	setReadFanout(t, tg, big, true)
	ca := dialWS(t, w, a)
	ca.helloLarge(t, 0)
	waitFor(t, 10*time.Second, "a indexed", func() bool { n, _ := w.ws.LargeSessions(big); return n == 1 })

	// The frames are read while the sends go on: a frame read only after
	// the sends ended would be timed late (on several servers a send's
	// answer waits for the other server's stages too).
	sent := make(chan []int64, 1)
	go func() {
		var want []int64
		defer func() { sent <- want }()
		for i := range 8 {
			m, err := b.sendE(big, fmt.Sprint("m", i))
			if err != nil {
				t.Error(err)
				return
			}
			want = append(want, m.Seq)
		}
	}()
	var got []int64
	var at []time.Time
	for len(got) < 8 {
		f := ca.nextTyped(t, protocol.FrameMessages)
		at = append(at, time.Now())
		got = append(got, seqsOf(f.Messages)...)
	}
	want := <-sent
	require.Equal(t, want, got, "every seq once, in order")
	require.Less(t, len(at), len(want), "frames coalesce the messages sent within an interval")
	for i := 1; i < len(at); i++ {
		require.GreaterOrEqual(t, at[i].Sub(at[i-1]), 350*time.Millisecond, "frame %d came %v after the one before", i, at[i].Sub(at[i-1]))
	}
}
