package ws

import (
	"errors"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// The push path (docs/websocket.md, "The push path"): hub wake-ups and
// heartbeats make a session re-read; the pusher reads the sessions
// signalled within PushWindow in one statement, pushes announced entries
// from memory without one, and rebases a stream that cannot go on.

// hour keeps the heartbeat (a read) out of a test.
const hour = time.Hour

// welcomed dials user and says hello after after, reading the welcome.
func (ts *testServer) welcomed(user, after int64) *client {
	ts.t.Helper()
	c := ts.dial(user)
	c.hello(after, nil)
	f := c.next()
	require.Equal(ts.t, protocol.FrameWelcome, f.Type, f.raw)
	return c
}

// reading waits until user's session has a read running, or pending in
// the pusher.
func (ts *testServer) reading(user int64) {
	ts.t.Helper()
	s := ts.session(user)
	p := ts.ws.push
	require.Eventually(ts.t, func() bool {
		s.mu.Lock()
		fetch := s.fetch
		s.mu.Unlock()
		p.mu.Lock()
		defer p.mu.Unlock()
		return fetch == fetchInflight || fetch == fetchPending && slices.Contains(p.pending, s)
	}, wait, time.Millisecond)
}

// idle waits until user's session has done the read its hello asked for
// and has none pending: what is appended from then on is read only when
// something makes it read again.
func (ts *testServer) idle(user int64) {
	ts.t.Helper()
	s := ts.session(user)
	require.Eventually(ts.t, func() bool {
		read := false
		for _, c := range ts.db.calledOf("read") {
			read = read || slices.Contains(c.users, user)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return read && s.fetch == fetchIdle
	}, wait, time.Millisecond)
}

// TestHeartbeat: every heartbeat pings and re-reads; its frame follows the
// read with the head it saw, so a push whose notification was lost is
// delivered within one heartbeat, before the heartbeat frame.
func TestHeartbeat(t *testing.T) {
	ts := newTestServer(t, serverOpts{cfg: Config{HeartbeatInterval: 20 * time.Millisecond}, admission: &fakeAdmission{admit: true}})
	ts.db.appendMessages(1, 10, 2)
	c := ts.welcomed(1, 2)
	f := c.next()
	require.Equal(t, protocol.FrameHeartbeat, f.Type)
	require.Equal(t, int64(2), f.Head)
	require.Equal(t, &protocol.Reconnect{AfterMS: 250, WindowMS: 1}, f.Reconnect, "the welcome's hint, refreshed")
	require.Positive(t, c.pings.Load(), "a ping goes out with each heartbeat")

	ts.db.appendMessages(1, 10, 3) // and no notification
	for f = c.next(); f.Type == protocol.FrameHeartbeat && f.Head == 2; f = c.next() {
	}
	require.Equal(t, protocol.FrameEntries, f.Type)
	require.Equal(t, []int64{3, 4, 5}, seqs(f))
	f = c.next()
	require.Equal(t, protocol.FrameHeartbeat, f.Type)
	require.Equal(t, int64(5), f.Head)
}

// TestHubWake: a notification of the user's head makes the session read
// after its cursor; another user's session is not read for it.
func TestHubWake(t *testing.T) {
	ts := newTestServer(t, serverOpts{listen: true, cfg: Config{HeartbeatInterval: hour}})
	ts.db.appendMessages(1, 10, 2)
	ts.db.appendMessages(2, 10, 2)
	c1 := ts.welcomed(1, 2)
	ts.welcomed(2, 2)
	ts.idle(1)
	ts.idle(2)
	ts.db.appendMessages(1, 10, 3)
	ts.db.appendMessages(2, 10, 1) // not notified
	ts.notify(map[int64]int64{1: 5}, nil)
	f := c1.next()
	require.Equal(t, []int64{3, 4, 5}, seqs(f))
	require.Equal(t, int64(5), f.Head)
	n := 0
	for _, call := range ts.db.calledOf("read") {
		if slices.Contains(call.users, 2) {
			n++
		}
	}
	require.Equal(t, 1, n, "user 2 was read for its hello only")
	c1.write(map[string]any{"type": "ping"})
	require.Equal(t, protocol.FramePong, c1.next().Type)
}

// TestListenLost: when the LISTEN connection comes back, the hub wakes
// every session to re-read whatever its head says: what committed while
// notifications could be lost is pushed.
func TestListenLost(t *testing.T) {
	ts := newTestServer(t, serverOpts{listen: true, cfg: Config{HeartbeatInterval: hour}})
	ts.db.appendMessages(1, 10, 2)
	c := ts.welcomed(1, 2)
	ts.idle(1)
	ts.db.appendMessages(1, 10, 2) // its notification lost
	ts.listen.drop()
	select {
	case <-ts.listen.listening:
	case <-time.After(wait):
		t.Fatal("the hub did not listen again")
	}
	f := c.next()
	require.Equal(t, protocol.FrameEntries, f.Type)
	require.Equal(t, []int64{3, 4}, seqs(f))
}

// TestPusherBatchesReads: the sessions signalled within the window are
// read by one statement (every user with its own cursor), and a batch goes
// as soon as PushMaxSessions are pending; none is read before.
func TestPusherBatchesReads(t *testing.T) {
	for _, tc := range []struct {
		name        string
		users       int
		maxSessions int
		batches     [][]int64 // the users of each read, in order
	}{
		{name: "one read for all", users: 3, maxSessions: 3, batches: [][]int64{{1, 2, 3}}},
		{name: "PushMaxSessions per read", users: 4, maxSessions: 2, batches: [][]int64{{1, 2}, {3, 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, serverOpts{cfg: Config{PushWindow: hour, PushMaxSessions: tc.maxSessions, PushBatch: 2,
				HeartbeatInterval: hour}})
			var pending []*client
			for u := int64(1); u <= int64(tc.users); u++ {
				ts.db.appendMessages(u, 10*u, 3)
				c := ts.welcomed(u, 0)
				require.Equal(t, []int64{1, 2}, seqs(c.next()), "the hello's page")
				pending = append(pending, c)
				if len(pending) < tc.maxSessions {
					ts.reading(u)
					require.Len(t, ts.db.calledOf("read"), int(u-1)/tc.maxSessions, "the window holds the read")
					continue
				}
				for _, c := range pending {
					require.Equal(t, []int64{3}, seqs(c.next()), "the rest, from the batched read")
				}
				pending = nil
			}
			reads := ts.db.calledOf("read")
			require.Len(t, reads, len(tc.batches))
			for i, r := range reads {
				got := append([]int64(nil), r.users...)
				sort.Slice(got, func(a, b int) bool { return got[a] < got[b] })
				require.Equal(t, tc.batches[i], got)
				require.Equal(t, []int64{2, 2, 2, 2}[:len(got)], r.afters, "each after its own cursor")
			}
		})
	}
}

// TestPusherAnnounced: entries a notification announces from exactly the
// cursor are pushed without a read of the inbox, with their messages from
// the cache or, for all sessions of the batch, one read of the misses; the
// window (here longer than the test) holds only reads. A run that does not
// continue the cursor is read instead, from the cursor.
func TestPusherAnnounced(t *testing.T) {
	ts := newTestServer(t, serverOpts{listen: true, cfg: Config{PushWindow: hour, HeartbeatInterval: hour}})
	ts.db.appendMessages(1, 10, 3)
	ts.db.appendMessages(2, 20, 3)
	c1, c2 := ts.welcomed(1, 3), ts.welcomed(2, 3)
	ts.reading(1)
	ts.reading(2)
	announced := counter(t, ts.ws.m.announced)

	// Both sessions' next entries announced: pushed without a read,
	// their four messages read in one statement.
	r1, r2 := ts.db.appendMessages(1, 10, 2), ts.db.appendMessages(2, 20, 2)
	ts.notify(map[int64]int64{1: 5, 2: 5}, map[int64]projection.Run{1: runOf(r1), 2: runOf(r2)})
	for _, c := range []*client{c1, c2} {
		f := c.next()
		require.Equal(t, protocol.FrameEntries, f.Type)
		require.Equal(t, []int64{4, 5}, seqs(f))
		require.Equal(t, int64(5), f.Head)
	}
	require.Empty(t, ts.db.calledOf("read"), "no inbox read: not even the hello's, which the window held")
	require.Len(t, ts.db.calledOf("messages"), 1, "the misses of both, in one read")
	require.Equal(t, announced+2, counter(t, ts.ws.m.announced))

	// A message in the cache (a send through this gateway): no read at all.
	r1 = ts.db.appendMessages(1, 10, 1)
	m := ts.db.msg(r1[0].conv, r1[0].seq)
	ts.reader.CacheMessage(1, &m)
	ts.notify(map[int64]int64{1: 6}, map[int64]projection.Run{1: runOf(r1)})
	f := c1.next()
	require.Equal(t, []int64{6}, seqs(f))
	require.Equal(t, m.MsgID, f.Entries[0].Message.MsgID)
	require.Len(t, ts.db.calledOf("messages"), 1)
	require.Empty(t, ts.db.calledOf("read"))

	// A run after a gap (entry 7 was not announced): read from the cursor.
	ts.db.appendMessages(1, 10, 1)
	r1 = ts.db.appendMessages(1, 10, 1)
	ts.notify(map[int64]int64{1: 8}, map[int64]projection.Run{1: runOf(r1)})
	f = c1.next()
	require.Equal(t, []int64{7, 8}, seqs(f), "contiguous from the cursor")
	reads := ts.db.calledOf("read")
	require.Len(t, reads, 1)
	require.Equal(t, []int64{6}, reads[0].afters)
}

// TestPusherRetries: a failed read is retried (after pushRetryDelay) from
// the same cursor, and the stream goes on where it was.
func TestPusherRetries(t *testing.T) {
	ts := newTestServer(t, serverOpts{cfg: Config{PushBatch: 1, HeartbeatInterval: hour}})
	ts.db.appendMessages(1, 10, 2)
	ts.db.failReads(errors.New("connection reset"), 1)
	c := ts.welcomed(1, 0)
	require.Equal(t, []int64{1}, seqs(c.next()))
	f := c.next()
	require.Equal(t, []int64{2}, seqs(f))
	reads := ts.db.calledOf("read")
	require.Len(t, reads, 2)
	require.Equal(t, []int64{1}, reads[0].afters)
	require.Equal(t, []int64{1}, reads[1].afters, "the retry reads from the same cursor")
	require.Equal(t, float64(1), counter(t, ts.ws.m.batchErrors))
}

// TestPusherRebase: a read that cannot continue the stream (a replay
// started a new epoch, or retention passed the cursor) is answered with
// too_long at the read's head, built with the user's large list; the
// stream goes on from that head.
func TestPusherRebase(t *testing.T) {
	for _, tc := range []struct {
		name  string
		move  func(db *fakeDB)
		epoch int64
		head  int64
	}{
		{name: "a new epoch", epoch: 2, head: 2, move: func(db *fakeDB) {
			db.setEpoch(2)
			db.set(1, func(u *fakeUser) { u.head, u.entries = 0, nil })
			db.appendMessages(1, 30, 2)
		}},
		{name: "retention passed the cursor", epoch: 1, head: 9, move: func(db *fakeDB) {
			db.appendMessages(1, 10, 4)
			db.set(1, func(u *fakeUser) { u.floor = 8 })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, serverOpts{cfg: Config{HeartbeatInterval: 20 * time.Millisecond}})
			ts.db.appendMessages(1, 10, 5)
			ts.db.setLarge(1, []inbox.LargeMembership{{LargeConv: protocol.LargeConv{ConversationID: 50, LastSeq: 9}}})
			c := ts.welcomed(1, 5)
			require.Equal(t, protocol.FrameHeartbeat, c.next().Type)
			tc.move(ts.db)
			f := c.nextOf(protocol.FrameTooLong)
			require.Equal(t, tc.epoch, f.Epoch)
			require.Equal(t, tc.head, f.Head)
			require.Equal(t, []protocol.LargeConv{{ConversationID: 50, LastSeq: 9}}, f.Large, "the large list read for it")
			require.NotEmpty(t, ts.db.calledOf("large_lists"))
			f = c.next()
			require.Equal(t, protocol.FrameHeartbeat, f.Type)
			require.Equal(t, tc.head, f.Head)

			ts.db.appendMessages(1, 10, 1)
			f = c.nextOf(protocol.FrameEntries)
			require.Equal(t, []int64{tc.head + 1}, seqs(f), "on from the new head")
		})
	}
}
