package ephemeral

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/ratelimit"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// Typing (docs/websocket.md, "Typing and presence"): the limits of one
// gateway, the member check with the NOTIFY, and the delivery by every
// gateway to its sessions of the conversation's other current members.

// TestTypingAllowed: at most one start per user, conversation and
// TypingInterval; a stop only while a start is live (within
// TypingExpiry); a start may follow a stop at once (docs/websocket.md).
// The clock is the argument.
func TestTypingAllowed(t *testing.T) {
	g := startGateway(t, newWorld(), gatewayOpts{noRun: true, cfg: Config{TypingInterval: 2 * time.Second, TypingExpiry: 6 * time.Second}})
	t0 := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	for i, step := range []struct {
		user, conv int64
		stop       bool
		at         time.Duration
		want       string
	}{
		{1, 10, false, 0, OutcomeBroadcast},
		{1, 10, false, time.Second, OutcomeRateLimited},
		{1, 10, false, 1999 * time.Millisecond, OutcomeRateLimited},
		{1, 11, false, time.Second, OutcomeBroadcast}, // another conversation
		{2, 10, false, time.Second, OutcomeBroadcast}, // another user
		{1, 10, false, 2 * time.Second, OutcomeBroadcast},
		{1, 10, true, 2500 * time.Millisecond, OutcomeBroadcast}, // a live start: stopped
		{1, 10, true, 2600 * time.Millisecond, OutcomeIgnored},   // nothing to stop
		{1, 10, false, 3 * time.Second, OutcomeBroadcast},        // a start may follow a stop at once
		{1, 10, false, 3500 * time.Millisecond, OutcomeRateLimited},
		{1, 10, true, 3600 * time.Millisecond, OutcomeBroadcast},
		{1, 10, false, 4 * time.Second, OutcomeBroadcast},
		{1, 10, true, 10*time.Second + time.Millisecond, OutcomeIgnored}, // expired: the client stopped showing it
		{1, 10, false, 10*time.Second + time.Millisecond, OutcomeBroadcast},
		{3, 12, true, 11 * time.Second, OutcomeIgnored}, // never started
	} {
		got := g.s.typingAllowed(step.user, step.conv, step.stop, t0.Add(step.at))
		require.Equal(t, step.want, got, "step %d: %+v", i, step)
	}
}

// TestTyping: a typing frame on gateway A reaches the local sessions of
// the conversation's other current members on every gateway, start and
// stop; not the typer's own sessions, a removed member or a user sharing
// no conversation; repeats are dropped without a statement; a non-member
// is refused with not_member and nothing is sent.
func TestTyping(t *testing.T) {
	w := newWorld()
	w.conversation(10, 1, 2, 3) // 4 was removed
	// A marker: user 5 is in user 1's delivery shard, so that its frame
	// comes after whatever user 1's frames brought, to every session.
	w.conversation(13, 5, 1, 2, 3, 4, 6)
	a := startGateway(t, w, gatewayOpts{})
	b := startGateway(t, w, gatewayOpts{})
	s1, s3a := a.join(1), a.join(3)
	s2, s1b, s4, s6, s3b := b.join(2), b.join(1), b.join(4), b.join(6), b.join(3)
	ctx := context.Background()

	out, err := a.s.Typing(ctx, 1, 10, false)
	require.NoError(t, err)
	require.Equal(t, OutcomeBroadcast, out)
	for _, s := range []*local{s3a, s2, s3b} {
		f := s.nextOf(t, protocol.FrameTyping)
		require.Equal(t, protocol.FrameTyping, f.Type)
		require.Equal(t, int64(10), f.ConversationID)
		require.Equal(t, int64(1), f.UserID)
		require.Equal(t, protocol.TypingStart, f.State)
		require.Equal(t, DefaultTypingExpiry.Milliseconds(), f.ExpiresInMS)
	}

	// A repeat within the interval: dropped before any statement.
	notifies := len(w.callsOf("typing_notify"))
	out, err = a.s.Typing(ctx, 1, 10, false)
	require.NoError(t, err)
	require.Equal(t, OutcomeRateLimited, out)
	require.Len(t, w.callsOf("typing_notify"), notifies)

	out, err = a.s.Typing(ctx, 1, 10, true)
	require.NoError(t, err)
	require.Equal(t, OutcomeBroadcast, out)
	for _, s := range []*local{s3a, s2, s3b} {
		f := s.nextOf(t, protocol.FrameTyping)
		require.Equal(t, protocol.TypingStop, f.State, "the stop is the next frame: the repeat was not sent")
		require.Zero(t, f.ExpiresInMS)
	}

	_, err = b.s.Typing(ctx, 5, 13, false)
	require.NoError(t, err)
	for _, s := range []*local{s1, s1b, s4, s6, s3a, s2, s3b} {
		f := s.nextOf(t, protocol.FrameTyping)
		require.Equal(t, int64(13), f.ConversationID, "user %d: the marker is its first frame since", s.user)
		require.Equal(t, int64(5), f.UserID)
	}

	// Not a member: refused, no NOTIFY; and limited like the others.
	out, err = a.s.Typing(ctx, 6, 10, false)
	require.Equal(t, OutcomeNotMember, out)
	require.Equal(t, protocol.CodeNotMember, apierr.From(err).Code)
	calls := len(w.callsOf("typing_notify"))
	out, err = a.s.Typing(ctx, 6, 10, false)
	require.NoError(t, err)
	require.Equal(t, OutcomeRateLimited, out)
	require.Len(t, w.callsOf("typing_notify"), calls, "a non-member costs one statement per interval")

	out, err = a.s.Typing(ctx, 2, 10, true)
	require.NoError(t, err)
	require.Equal(t, OutcomeIgnored, out, "a stop with nothing to stop")

	m := a.s.m.typing
	require.Equal(t, float64(2), counter(t, m.WithLabelValues(OutcomeBroadcast)))
	require.Equal(t, float64(2), counter(t, m.WithLabelValues(OutcomeRateLimited)))
	require.Equal(t, float64(1), counter(t, m.WithLabelValues(OutcomeNotMember)))
	require.Equal(t, float64(1), counter(t, m.WithLabelValues(OutcomeIgnored)))
	for _, c := range w.callsOf("notify") {
		require.NotEqual(t, byte('t'), c.args[1][0], "typing is one statement: the member check and the NOTIFY")
	}
}

// TestTypingLimits: a broadcast also spends a token of the user's write
// bucket (an empty one drops the frame); a failed statement is an error.
func TestTypingLimits(t *testing.T) {
	w := newWorld()
	w.conversation(10, 1, 2)
	w.conversation(11, 1, 2)
	w.conversation(12, 1, 2)
	g := startGateway(t, w, gatewayOpts{limits: ratelimit.New(rate.Every(time.Hour), 2)})
	ctx := context.Background()
	out, err := g.s.Typing(ctx, 1, 10, false)
	require.NoError(t, err)
	require.Equal(t, OutcomeBroadcast, out)

	w.do(func() { w.fail["typing_notify"] = errors.New("connection reset") })
	out, err = g.s.Typing(ctx, 1, 11, false)
	require.Error(t, err)
	require.Equal(t, OutcomeFailed, out)

	out, err = g.s.Typing(ctx, 1, 12, false)
	require.NoError(t, err)
	require.Equal(t, OutcomeRateLimited, out, "the write bucket is empty")
	require.Len(t, w.callsOf("typing_notify"), 2)
}

// TestTypingAudience: a gateway reads who of its users a frame is for by
// the smaller side: the conversation's members when it has no more than
// the gateway has users, else its users among the members; with no local
// session but the typer's, nothing at all.
func TestTypingAudience(t *testing.T) {
	for _, tc := range []struct {
		name       string
		members    []int64
		local      []int64 // sessions here
		statements []string
		list       []int64 // the users asked about by typing_by_list
		to         []int64 // who got the frame
	}{
		{name: "a small conversation", members: []int64{1, 2, 3}, local: []int64{2, 7, 8},
			statements: []string{"typing_by_conv"}, to: []int64{2}},
		{name: "a big conversation", members: []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, local: []int64{2, 11},
			statements: []string{"typing_by_conv", "typing_by_list"}, list: []int64{2, 11}, to: []int64{2}},
		{name: "only the typer here", members: []int64{1, 2}, local: []int64{1}},
		{name: "nobody here", members: []int64{1, 2}},
		{name: "no other member here", members: []int64{1, 2}, local: []int64{1, 9}, statements: []string{"typing_by_conv"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			w.conversation(10, tc.members...)
			g := startGateway(t, w, gatewayOpts{noRun: true})
			var sessions []*local
			for _, u := range tc.local {
				sessions = append(sessions, g.join(u))
			}
			before := len(w.calls())
			require.NoError(t, g.s.deliverTyping(context.Background(), projection.Typing{Conv: 10, User: 1, ExpiresMS: 6000}))
			got := w.calls()[before:]
			if len(got) == 0 {
				got = nil
			}
			require.Equal(t, tc.statements, got)
			if tc.list != nil {
				require.ElementsMatch(t, tc.list, argInts(w.callsOf("typing_by_list")[0].args[1]))
			}
			var to []int64
			for _, s := range sessions {
				if len(s.frames) > 0 {
					to = append(to, s.user)
				}
			}
			require.Equal(t, tc.to, to)
		})
	}
}

// TestReceipts: a read receipt goes to the local sessions of the
// conversation's other current members; not to the reader's own, not for
// a member who hides its receipts, not in a read-mode conversation.
func TestReceipts(t *testing.T) {
	w := newWorld()
	w.conversation(10, 1, 2, 3)
	w.conversation(30, 1, 2)
	w.do(func() {
		w.readFanout[30] = true
		w.hideR[3] = true
		for _, u := range []int64{1, 2, 3} {
			w.hideP[u] = true // no presence frames in between
		}
	})
	a := startGateway(t, w, gatewayOpts{})
	s1, s2, s3 := a.join(1), a.join(2), a.join(3)

	a.s.Receipt(10, 1, 7) // as the hub hands the projector's c token over
	for _, s := range []*local{s2, s3} {
		f := s.next(t)
		require.Equal(t, protocol.FrameReceipt, f.kind)
		require.Equal(t, protocol.ReceiptFrame{Type: protocol.FrameReceipt, ConversationID: 10, UserID: 1, ReadSeq: 7},
			protocol.ReceiptFrame{Type: f.Type, ConversationID: f.ConversationID, UserID: f.UserID, ReadSeq: f.ReadSeq})
	}
	require.Empty(t, s1.frames, "not to the reader")

	ctx := context.Background()
	for _, r := range []projection.Read{
		{Conv: 30, User: 1, Seq: 2}, // read mode
		{Conv: 10, User: 3, Seq: 5}, // hides its receipts
		{Conv: 99, User: 1, Seq: 5}, // no such conversation
	} {
		require.NoError(t, a.s.deliverReceipt(ctx, r))
		for _, s := range []*local{s1, s2, s3} {
			require.Empty(t, s.frames, "%+v to user %d", r, s.user)
		}
	}
}

// TestHandle: the ephemeral channel's payloads are queued by user for
// delivery and dropped, counted, when the queue is full; a session that
// does not take a frame is counted.
func TestHandle(t *testing.T) {
	w := newWorld()
	w.conversation(10, 1, 2, 5, 9)
	g := startGateway(t, w, gatewayOpts{noRun: true, cfg: Config{Queue: 4}}) // one a worker
	var b []byte
	for _, u := range []int64{1, 5, 9} { // one shard
		b = projection.AppendTyping(b, projection.Typing{Conv: 10, User: u, ExpiresMS: 6000})
	}
	b = projection.AppendTyping(b, projection.Typing{Conv: 10, User: 2, ExpiresMS: 6000}) // another
	g.s.Handle(string(b) + " x1:2:3 t0:1:1")                                              // and what does not parse
	n := g.s.m.notifications
	require.Equal(t, float64(2), counter(t, n.WithLabelValues("received")))
	require.Equal(t, float64(2), counter(t, n.WithLabelValues("dropped")))

	s2 := g.join(2)
	s2.refuse.Store(true)
	require.NoError(t, g.s.deliverTyping(context.Background(), projection.Typing{Conv: 10, User: 1, ExpiresMS: 6000}))
	require.Equal(t, float64(1), counter(t, g.s.m.dropped.WithLabelValues(protocol.FrameTyping)))
	require.Zero(t, counter(t, g.s.m.delivered.WithLabelValues(protocol.FrameTyping)))
	s2.refuse.Store(false)
	require.NoError(t, g.s.deliverTyping(context.Background(), projection.Typing{Conv: 10, User: 1}))
	require.Equal(t, float64(1), counter(t, g.s.m.delivered.WithLabelValues(protocol.FrameTyping)))
	f := s2.next(t)
	require.Equal(t, protocol.TypingStop, f.State, "expires 0 is a stop")
}

// TestTypingLimitsForgotten: the limits that no longer limit anything
// (older than the interval and the expiry) are forgotten as the map grows,
// so that it holds the typing of the last few seconds only.
func TestTypingLimitsForgotten(t *testing.T) {
	g := startGateway(t, newWorld(), gatewayOpts{noRun: true})
	t0 := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	for c := int64(1); c <= 1500; c++ {
		require.Equal(t, OutcomeBroadcast, g.s.typingAllowed(1, c, false, t0))
	}
	later := t0.Add(DefaultTypingExpiry)
	for c := int64(1501); c <= 2048; c++ {
		require.Equal(t, OutcomeBroadcast, g.s.typingAllowed(1, c, false, later))
	}
	g.s.mu.Lock()
	n := len(g.s.typing)
	g.s.mu.Unlock()
	require.Equal(t, 2048-1500, n, "the 1500 old ones are forgotten, the recent ones kept")
	require.Equal(t, OutcomeRateLimited, g.s.typingAllowed(1, 2000, false, later), "a recent one still limits")
}
