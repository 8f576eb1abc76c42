package ws

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// The read-mode pushes: the lanes that spread a push's frames over its
// pacing interval, the queueing of such a frame, and the index that
// decides which session gets which frame.

// parked is a started session of ts's server whose writer counts as
// running, so that what is queued for it stays in its queue.
func parked(ts *testServer, id uint64) *session {
	s := &session{ws: ts.ws, id: id, user: int64(id), state: stateStarted}
	s.out.running = true
	return s
}

// queuedKinds are the frames in s's ordered stream.
func queuedKinds(s *session) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, q := range s.out.data {
		out = append(out, q.kind+":"+string(q.b))
	}
	return out
}

// TestLaneSend: every session's frame goes to the lane of its id, with the
// frame meant for it; lane i's part is due i/largeLanes of the spread
// after lane 0's; lanes with nobody get no job.
func TestLaneSend(t *testing.T) {
	ts := newTestServer(t, serverOpts{noRun: true})
	for _, tc := range []struct {
		name  string
		ids   []uint64
		lanes []int // that get a job
	}{
		{name: "every lane", ids: []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 31, 32},
			lanes: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
		{name: "a few", ids: []uint64{3, 19, 35, 4}, lanes: []int{3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLaneSet()
			var to []*session
			var frames [][]byte
			for _, id := range tc.ids {
				to = append(to, parked(ts, id))
				frames = append(frames, fmt.Appendf(nil, "frame of %d", id))
			}
			const spread = 160 * time.Millisecond
			l.send(t.Context(), to, frames, protocol.FrameMessages, spread)
			var first time.Time
			var got []int
			for i := range l.q {
				select {
				case j := <-l.q[i]:
					got = append(got, i)
					if first.IsZero() {
						first = j.at.Add(-spread * time.Duration(i) / largeLanes)
					}
					require.Equal(t, first.Add(spread*time.Duration(i)/largeLanes), j.at, "lane %d", i)
					require.Equal(t, protocol.FrameMessages, j.kind)
					require.Len(t, j.frames, len(j.to))
					for k, s := range j.to {
						require.Equal(t, i, int(s.id%largeLanes))
						require.Equal(t, fmt.Sprintf("frame of %d", s.id), string(j.frames[k]))
					}
				default:
				}
			}
			require.Equal(t, tc.lanes, got)
		})
	}
}

// TestLaneRun: a lane delivers its jobs in order, each frame to its
// session's ordered stream.
func TestLaneRun(t *testing.T) {
	ts := newTestServer(t, serverOpts{noRun: true})
	l := newLaneSet()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.run(ctx)
	}()
	a, b := parked(ts, 5), parked(ts, 21) // one lane
	c := parked(ts, 6)
	l.send(ctx, []*session{a, b, c}, [][]byte{[]byte("1a"), []byte("1b"), []byte("1c")}, protocol.FrameMessages, 0)
	l.send(ctx, []*session{a, b}, [][]byte{[]byte("2a"), []byte("2b")}, protocol.FrameLarge, 0)
	require.Eventually(t, func() bool { return len(queuedKinds(a)) == 2 && len(queuedKinds(b)) == 2 }, wait, time.Millisecond)
	require.Equal(t, []string{"messages:1a", "large:2a"}, queuedKinds(a))
	require.Equal(t, []string{"messages:1b", "large:2b"}, queuedKinds(b))
	require.Eventually(t, func() bool { return len(queuedKinds(c)) == 1 }, wait, time.Millisecond)
	require.Equal(t, []string{"messages:1c"}, queuedKinds(c))
	cancel()
	<-done
}

// TestPushLarge: a read-mode frame is queued only to a started session;
// one frame always fits an empty queue; one that would overflow a queue
// closes the session with 4008 (it is not re-read later, so it cannot be
// dropped).
func TestPushLarge(t *testing.T) {
	ts := newTestServer(t, serverOpts{noRun: true, cfg: Config{QueueBytes: 1024}})
	big := make([]byte, 2000)
	for _, tc := range []struct {
		name    string
		state   sessionState
		queued  int // bytes already queued
		frame   []byte
		want    int // frames queued after
		closing bool
	}{
		{name: "before the welcome", state: stateHello, frame: []byte("x"), want: 0},
		{name: "started", state: stateStarted, frame: []byte("x"), want: 1},
		{name: "a big frame fits an empty queue", state: stateStarted, frame: big, want: 1},
		{name: "a full queue closes", state: stateStarted, queued: 1000, frame: []byte("0123456789abcdefghijklmnopqrstuvwxyz"), want: 1, closing: true},
		{name: "closing", state: stateClosing, frame: []byte("x"), want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := parked(ts, 1)
			s.state = tc.state
			if tc.queued > 0 {
				s.out.pushData(queued{b: make([]byte, tc.queued), kind: protocol.FrameEntries})
			}
			before := slowCloses(t, ts, "large")
			s.pushLarge(tc.frame, protocol.FrameMessages)
			require.Len(t, queuedKinds(s), tc.want)
			s.mu.Lock()
			state, code := s.state, s.closeCode
			s.mu.Unlock()
			if tc.closing {
				require.Equal(t, stateClosing, state)
				require.Equal(t, protocol.CloseTooSlow, code)
				require.Equal(t, before+1, slowCloses(t, ts, "large"))
			} else {
				require.Equal(t, tc.state, state)
				require.Zero(t, code)
			}
		})
	}
}

// TestLargePushes: the sessions whose hello said "large": true get their
// list again at once (a large frame) and, per notification of a read-mode
// conversation, one read of its news turned into a messages frame for
// every one of them, without the messages before each one's join; a
// membership token re-reads the lists of its user only.
func TestLargePushes(t *testing.T) {
	ts := newTestServer(t, serverOpts{listen: true, cfg: Config{HeartbeatInterval: hour}})
	conv := int64(50)
	list := func(joined int64) []inbox.LargeMembership {
		return []inbox.LargeMembership{{LargeConv: protocol.LargeConv{ConversationID: conv, LastSeq: 3}, JoinedSeq: joined}}
	}
	ts.db.setLarge(1, list(1))
	ts.db.setLarge(2, list(5))
	ts.db.setNews(conv, 6)
	var clients []*client
	for u := int64(1); u <= 2; u++ {
		c := ts.dial(u)
		c.write(map[string]any{"type": "hello", "after": 0, "large": true})
		w := c.next()
		require.Equal(t, protocol.FrameWelcome, w.Type)
		require.Equal(t, []protocol.LargeConv{{ConversationID: conv, LastSeq: 3}}, w.Large)
		f := c.next()
		require.Equal(t, protocol.FrameLarge, f.Type, "the list read again once registered")
		require.Equal(t, w.Large, f.Large)
		clients = append(clients, c)
	}
	n, _ := ts.ws.LargeSessions(conv)
	require.Equal(t, 2, n)

	var e projection.Encoder
	e.Large(projection.Large{Conv: conv, LastSeq: 6})
	ts.listen.notify(projection.DefaultChannel, e.Payloads()[0])
	for i, want := range [][]int64{{4, 5, 6}, {5, 6}} {
		f := clients[i].next()
		require.Equal(t, protocol.FrameMessages, f.Type, f.raw)
		require.Equal(t, conv, f.ConversationID)
		require.Equal(t, int64(6), f.LastSeq)
		var got []int64
		for _, m := range f.Messages {
			got = append(got, m.Seq)
		}
		require.Equal(t, want, got, "user %d", i+1)
		require.NotNil(t, f.Changed)
	}
	require.Len(t, ts.db.calledOf("large_news"), 1, "one read for every session")

	// User 2 leaves the conversation: its list is read again, and only its.
	lists := len(ts.db.calledOf("large_lists"))
	ts.db.setLarge(2, nil)
	e = projection.Encoder{}
	e.Member(projection.Membership{Conv: conv, User: 2})
	ts.listen.notify(projection.DefaultChannel, e.Payloads()[0])
	f := clients[1].next()
	require.Equal(t, protocol.FrameLarge, f.Type)
	require.Empty(t, f.Large)
	require.Contains(t, f.raw, `"large":[]`, "the whole list, never null")
	calls := ts.db.calledOf("large_lists")
	require.Len(t, calls, lists+1)
	require.Equal(t, []int64{2}, calls[lists].users)
	n, _ = ts.ws.LargeSessions(conv)
	require.Equal(t, 1, n)
}
