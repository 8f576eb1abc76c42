package ws

import (
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// Slow and stopped clients (docs/websocket.md, "Slow clients and
// memory"): the server's side of the connection is a gateConn, whose
// writes the test holds as the socket of a client that stopped reading.

// holding dials user with its writes held from before the hello.
func (ts *testServer) holding(user int64) (*client, *gateConn, *session) {
	ts.t.Helper()
	c, gc, err := ts.dialHeader(http.Header{"Authorization": {"Bearer " + itoa(user)}})
	require.NoError(ts.t, err)
	gc.hold()
	return c, gc, ts.session(user)
}

func itoa(v int64) string { return string(num(v)) }

// blocked waits until s's writer is blocked in a write.
func blocked(t *testing.T, s *session) {
	t.Helper()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.out.writeStart.IsZero()
	}, wait, time.Millisecond)
}

func slowCloses(t *testing.T, ts *testServer, reason string) float64 {
	t.Helper()
	return counter(t, ts.ws.m.slowCloses.WithLabelValues(reason))
}

// TestRepliesOvertakeTheStream: replies (pong, acks, errors) are written
// before the queued stream; the stream keeps its order.
func TestRepliesOvertakeTheStream(t *testing.T) {
	ts := newTestServer(t, serverOpts{cfg: Config{PushBatch: 1, HeartbeatInterval: hour}})
	ts.db.appendMessages(1, 10, 3)
	c, gc, s := ts.holding(1)
	c.hello(0, nil)
	blocked(t, s) // on the welcome; the first entries are queued behind it
	c.write(map[string]any{"type": "ping"})
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.out.control) == 1
	}, wait, time.Millisecond)
	gc.release()
	var got []string
	for len(got) < 5 {
		f := c.next()
		name := f.Type
		if f.Type == protocol.FrameEntries {
			name += itoa(f.Entries[0].InboxSeq)
		}
		got = append(got, name)
	}
	require.Equal(t, []string{"welcome", "pong", "entries1", "entries2", "entries3"}, got)
}

// TestStoppedClient: a write that does not complete within WriteTimeout
// closes with 4008; what it could not send is kept whole, and the close
// frame follows it.
func TestStoppedClient(t *testing.T) {
	ts := newTestServer(t, serverOpts{cfg: Config{WriteTimeout: 200 * time.Millisecond, HeartbeatInterval: hour}})
	c, gc, _ := ts.holding(1)
	c.hello(0, nil)
	select {
	case <-gc.timedOut:
	case <-time.After(wait):
		t.Fatal("the write did not time out")
	}
	gc.release() // the client reads again, within the close frame's own WriteTimeout
	code, frames := c.closed()
	require.Equal(t, protocol.CloseTooSlow, code)
	require.Len(t, frames, 1)
	require.Equal(t, protocol.FrameWelcome, frames[0].Type, "the frame cut by the timeout arrives whole")
	require.Equal(t, float64(1), slowCloses(t, ts, "write_timeout"))
}

// TestLaggingClient: a session whose queue is half full reads no more: the
// rest waits in the inbox and the session is lagging; lagging for
// SlowTimeout closes it with 4008, else it is caught up in PushBatch
// frames once its client reads again.
func TestLaggingClient(t *testing.T) {
	for _, tc := range []struct {
		name string
		slow time.Duration
	}{
		{name: "closed with 4008", slow: time.Nanosecond},
		{name: "caught up", slow: hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{QueueBytes: 1024, PushBatch: 1, SlowTimeout: tc.slow, WriteTimeout: hour, HeartbeatInterval: hour}
			ts := newTestServer(t, serverOpts{cfg: cfg})
			ts.db.appendMessages(1, 10, 20)
			c, gc, s := ts.holding(1)
			c.hello(0, nil)
			var info SessionInfo
			require.Eventually(t, func() bool {
				info = ts.ws.Inspect()[0]
				return !info.LaggingSince.IsZero()
			}, wait, time.Millisecond)
			require.Less(t, info.Cursor, info.Head, "entries wait in the inbox")
			require.LessOrEqual(t, info.QueuedBytes, cfg.QueueBytes/2+512, "half the queue and one frame at most")
			require.Equal(t, float64(1), gauge(t, ts))
			reads := len(ts.db.calledOf("read"))
			require.Less(t, reads, 20, "not read ahead")
			gc.release()

			if tc.slow == time.Nanosecond {
				code, frames := c.closed()
				require.Equal(t, protocol.CloseTooSlow, code)
				require.Len(t, frames, 1, "the queued stream is dropped")
				require.Equal(t, protocol.FrameWelcome, frames[0].Type)
				require.Equal(t, float64(1), slowCloses(t, ts, "lag"))
				return
			}
			require.Equal(t, protocol.FrameWelcome, c.next().Type)
			for want := int64(1); want <= 20; want++ {
				f := c.next()
				require.Equal(t, []int64{want}, seqs(f))
			}
			require.Eventually(t, func() bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				return s.laggingSince.IsZero()
			}, wait, time.Millisecond)
			require.Zero(t, gauge(t, ts))
			require.Zero(t, slowCloses(t, ts, "lag"))
		})
	}
}

func gauge(t *testing.T, ts *testServer) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, ts.ws.m.lagging.Write(&m))
	return m.GetGauge().GetValue()
}

// TestRepliesNotRead: a client that asks without reading the answers (the
// reply queue full) is closed with 4008, at once: the blocked write is
// stalled rather than waited for (WriteTimeout is an hour here).
func TestRepliesNotRead(t *testing.T) {
	ts := newTestServer(t, serverOpts{cfg: Config{ControlQueue: 1, WriteTimeout: hour, HeartbeatInterval: hour}})
	c, gc, err := ts.dialHeader(http.Header{"Authorization": {"Bearer 1"}})
	require.NoError(t, err)
	c.hello(0, nil)
	require.Equal(t, protocol.FrameWelcome, c.next().Type)
	s := ts.session(1)
	gc.hold()
	c.write(map[string]any{"type": "ping"})
	blocked(t, s)
	c.write(map[string]any{"type": "ping"}) // queued
	c.write(map[string]any{"type": "ping"}) // one too many
	select {
	case <-gc.timedOut: // the kick
	case <-time.After(wait):
		t.Fatal("the blocked write was not stalled")
	}
	gc.release()
	code, frames := c.closed()
	require.Equal(t, protocol.CloseTooSlow, code)
	require.Len(t, frames, 1)
	require.Equal(t, protocol.FramePong, frames[0].Type)
	require.Equal(t, float64(1), slowCloses(t, ts, "control"))
}
