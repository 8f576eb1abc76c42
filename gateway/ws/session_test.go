package ws

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/protocol"
)

// The session's state machine as a client sees it (docs/websocket.md,
// "Frames" and "The stream"): what frames a hello, a bad hello, a second
// hello, a late hello, pings, bad frames and typing get, in which order.

// counter is the value of a counter (or a counter of a vector).
func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// TestHello: the answer to a hello is the welcome, then the catch-up in
// frames of PushBatch entries, a too_long, or a refusal that closes; the
// heartbeat that follows the catch-up (its read reaches the head) ends
// the stream the case looks at, so that nothing else came before it.
func TestHello(t *testing.T) {
	type want struct {
		frames []string  // data frames after the welcome, up to the heartbeat
		seqs   [][]int64 // the entries frames' inbox_seqs
		code   int       // a close instead (after an error frame)
		errMsg string    // in that error frame
	}
	for _, tc := range []struct {
		name  string
		lag   int64
		setup func(db *fakeDB)
		hello map[string]any
		want  want
	}{
		{name: "catch-up in PushBatch frames", hello: map[string]any{"after": 0},
			want: want{frames: []string{"entries", "entries", "entries"}, seqs: [][]int64{{1, 2}, {3, 4}, {5}}}},
		{name: "from the cursor", hello: map[string]any{"after": 2},
			want: want{frames: []string{"entries", "entries"}, seqs: [][]int64{{3, 4}, {5}}}},
		{name: "the current epoch", hello: map[string]any{"after": 3, "epoch": 1},
			want: want{frames: []string{"entries"}, seqs: [][]int64{{4, 5}}}},
		{name: "epoch 0 with after 0 is no replay", hello: map[string]any{"after": 0, "epoch": 0},
			want: want{frames: []string{"entries", "entries", "entries"}, seqs: [][]int64{{1, 2}, {3, 4}, {5}}}},
		{name: "at the head", hello: map[string]any{"after": 5}, want: want{}},
		{name: "no after is 0", hello: map[string]any{}, lag: 2,
			want: want{frames: []string{"too_long"}}},
		{name: "too long: lag", hello: map[string]any{"after": 1}, lag: 3,
			want: want{frames: []string{"too_long"}}},
		{name: "too long: stale epoch", hello: map[string]any{"after": 4, "epoch": 0},
			want: want{frames: []string{"too_long"}}},
		{name: "too long: below the floor", hello: map[string]any{"after": 1},
			setup: func(db *fakeDB) { db.set(1, func(u *fakeUser) { u.floor = 2 }) },
			want:  want{frames: []string{"too_long"}}},
		{name: "after beyond the head", hello: map[string]any{"after": 6},
			want: want{code: protocol.CloseProtocol, errMsg: "beyond the inbox head 5"}},
		{name: "negative after", hello: map[string]any{"after": -1},
			want: want{code: protocol.CloseProtocol, errMsg: "parameter after"}},
		{name: "negative epoch", hello: map[string]any{"after": 1, "epoch": -3},
			want: want{code: protocol.CloseProtocol, errMsg: "parameter epoch"}},
		{name: "after not an integer", hello: map[string]any{"after": "12"},
			want: want{code: protocol.CloseProtocol}},
		{name: "after a fraction", hello: map[string]any{"after": 1.5},
			want: want{code: protocol.CloseProtocol}},
		{name: "the read fails", hello: map[string]any{"after": 0},
			setup: func(db *fakeDB) { db.failSync(errors.New("connection refused")) },
			want:  want{code: protocol.CloseInternal}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, serverOpts{cfg: Config{PushBatch: 2, HeartbeatInterval: 20 * time.Millisecond}, tooLongLag: tc.lag})
			ts.db.appendMessages(1, 10, 5)
			ts.db.set(1, func(u *fakeUser) { u.counts = protocol.Counts{UnreadTotal: 4, MentionTotal: 1} })
			if tc.setup != nil {
				tc.setup(ts.db)
			}
			c := ts.dial(1)
			hello := map[string]any{"type": protocol.FrameHello}
			for k, v := range tc.hello {
				hello[k] = v
			}
			c.write(hello)

			if tc.want.code != 0 {
				code, frames := c.closed()
				require.Equal(t, tc.want.code, code)
				require.Len(t, frames, 1, "one error frame before the close")
				require.Equal(t, protocol.FrameError, frames[0].Type)
				if tc.want.code == protocol.CloseProtocol {
					require.Equal(t, protocol.CodeBadRequest, frames[0].Code)
				}
				require.Contains(t, frames[0].ErrorMessage(), tc.want.errMsg)
				return
			}
			w := c.next()
			require.Equal(t, protocol.FrameWelcome, w.Type, w.raw)
			require.Equal(t, int64(1), w.Epoch)
			require.Equal(t, int64(5), w.Head)
			require.Equal(t, int64(20), w.HeartbeatMS)
			require.Equal(t, protocol.Counts{UnreadTotal: 4, MentionTotal: 1}, w.Counts)
			require.Nil(t, w.Reconnect, "no reconnect hint without Admission")
			var got []string
			var gotSeqs [][]int64
			for {
				f := c.next()
				if f.Type == protocol.FrameHeartbeat {
					require.Equal(t, int64(5), f.Head)
					break
				}
				got = append(got, f.Type)
				switch f.Type {
				case protocol.FrameEntries:
					gotSeqs = append(gotSeqs, seqs(f))
					require.Equal(t, int64(5), f.Head, "the head at the read")
				case protocol.FrameTooLong:
					require.True(t, f.TooLong)
					require.Equal(t, int64(5), f.Head)
					require.Equal(t, int64(1), f.Epoch)
					require.Len(t, f.Conversations, 1)
					require.Equal(t, int64(7), f.Conversations[0].ConversationID)
				}
			}
			require.Equal(t, tc.want.frames, got)
			require.Equal(t, tc.want.seqs, gotSeqs)
			// The hello is read with GET /v1/sync's rules, once; the rest
			// of the catch-up by the pusher.
			require.Len(t, ts.db.calledOf("sync"), 1)
		})
	}
}

// TestHelloAfterTooLongGoesOnFromTheHead: after a too_long the stream
// continues at its head, and the rebase was asked at the head read.
func TestHelloAfterTooLongGoesOnFromTheHead(t *testing.T) {
	ts := newTestServer(t, serverOpts{listen: true, tooLongLag: 2})
	ts.db.appendMessages(1, 10, 5)
	c := ts.dial(1)
	c.hello(0, nil)
	require.Equal(t, protocol.FrameWelcome, c.next().Type)
	tl := c.next()
	require.Equal(t, protocol.FrameTooLong, tl.Type)
	require.Equal(t, int64(5), tl.Head)
	require.Equal(t, 1, ts.rebaser.called())
	ts.db.appendMessages(1, 10, 2)
	ts.notify(map[int64]int64{1: 7}, nil)
	f := c.next()
	require.Equal(t, protocol.FrameEntries, f.Type)
	require.Equal(t, []int64{6, 7}, seqs(f))
}

// TestHelloRebaseFails: a too-long answer that cannot be built closes with
// 1011 after an error frame, as a failed read does.
func TestHelloRebaseFails(t *testing.T) {
	ts := newTestServer(t, serverOpts{tooLongLag: 2})
	ts.rebaser.fail(errors.New("conversation list unavailable"))
	ts.db.appendMessages(1, 10, 5)
	c := ts.dial(1)
	c.hello(0, nil)
	code, frames := c.closed()
	require.Equal(t, protocol.CloseInternal, code)
	require.Len(t, frames, 1)
	require.Equal(t, protocol.CodeInternal, frames[0].Code)
}

// TestSecondHello: only the first hello is answered; a second one, well
// formed or not, gets an error frame and the connection stays open.
func TestSecondHello(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	ts.db.appendMessages(1, 10, 2)
	c := ts.dial(1)
	c.hello(0, nil)
	require.Equal(t, protocol.FrameWelcome, c.next().Type)
	require.Equal(t, []int64{1, 2}, seqs(c.next()))
	for _, again := range []map[string]any{
		{"type": "hello", "after": 0},
		{"type": "hello", "after": "not a number"},
		{"type": "hello", "after": 99},
	} {
		c.write(again)
		f := c.next()
		require.Equal(t, protocol.FrameError, f.Type, "%v", again)
		require.Equal(t, protocol.CodeBadRequest, f.Code)
		require.Contains(t, f.ErrorMessage(), "hello was already received")
	}
	c.write(map[string]any{"type": "ping"})
	require.Equal(t, protocol.FramePong, c.next().Type)
	require.Len(t, ts.db.calledOf("sync"), 1)
}

// TestHelloTimeout: no hello within HelloTimeout: an error frame and 1008.
func TestHelloTimeout(t *testing.T) {
	ts := newTestServer(t, serverOpts{cfg: Config{HelloTimeout: 30 * time.Millisecond}})
	c := ts.dial(1)
	code, frames := c.closed()
	require.Equal(t, protocol.CloseProtocol, code)
	require.Len(t, frames, 1)
	require.Equal(t, protocol.CodeBadRequest, frames[0].Code)
	require.Contains(t, frames[0].ErrorMessage(), "no hello within")
	require.Empty(t, ts.db.calledOf("sync"))
}

// TestHelloInTime: a hello in time stops the hello deadline: the session
// outlives it (its heartbeats, 20ms apart, come for longer than the 30ms).
func TestHelloInTime(t *testing.T) {
	ts := newTestServer(t, serverOpts{cfg: Config{HelloTimeout: 30 * time.Millisecond, HeartbeatInterval: 20 * time.Millisecond}})
	c := ts.dial(1)
	c.hello(0, nil)
	require.Equal(t, protocol.FrameWelcome, c.next().Type)
	start := time.Now()
	for beats := 0; beats < 3 || time.Since(start) < 60*time.Millisecond; beats++ {
		require.Equal(t, protocol.FrameHeartbeat, c.next().Type)
	}
}

// TestHelloLarge: a hello with "large": true gets the large list in its
// welcome and registers the session in the index of read-mode
// conversations, which its end removes it from.
func TestHelloLarge(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	ts.db.setLarge(1, []inbox.LargeMembership{{LargeConv: protocol.LargeConv{ConversationID: 50, LastSeq: 3, ChangeCount: 1}, JoinedSeq: 1}})
	c := ts.dial(1)
	c.write(map[string]any{"type": "hello", "after": 0, "large": true})
	w := c.next()
	require.Equal(t, protocol.FrameWelcome, w.Type)
	require.Equal(t, []protocol.LargeConv{{ConversationID: 50, LastSeq: 3, ChangeCount: 1}}, w.Large)
	require.Eventually(t, func() bool { n, ok := ts.ws.LargeSessions(50); return ok && n == 1 }, wait, time.Millisecond)
	require.NoError(t, c.conn.Close())
	require.Eventually(t, func() bool { _, ok := ts.ws.LargeSessions(50); return !ok }, wait, time.Millisecond)

	// Without it, the session is not in the index.
	c = ts.dial(1)
	c.hello(0, nil)
	require.Equal(t, protocol.FrameWelcome, c.next().Type)
	c.write(map[string]any{"type": "ping"})
	require.Equal(t, protocol.FramePong, c.next().Type)
	_, ok := ts.ws.LargeSessions(50)
	require.False(t, ok)
}

// TestBadFrames: frames that cannot be read are answered with a
// bad_request error frame naming the send or change they are (when its
// id is valid), and the connection stays open; before a hello as after.
func TestBadFrames(t *testing.T) {
	const id = "0f8fad5b-d9cb-469f-a165-70867728950e"
	for _, tc := range []struct {
		name      string
		binary    bool
		raw       string
		msgID     string
		changeID  string
		inMessage string
	}{
		{name: "binary", binary: true, raw: `{"type":"ping"}`, inMessage: "JSON text"},
		{name: "not UTF-8", raw: "{\"type\":\"ping\",\"x\":\"\xff\"}", inMessage: "UTF-8"},
		{name: "not JSON", raw: `{not json`},
		{name: "unknown type", raw: `{"type":"dance"}`, inMessage: `"dance"`},
		{name: "send with a NUL", raw: `{"type":"send","conversation_id":1,"msg_id":"` + id + `","body":"a\u0000b"}`, msgID: id},
		{name: "send with a lone surrogate, bad id", raw: `{"type":"send","conversation_id":1,"msg_id":"x","body":"\ud800"}`},
		{name: "send of the wrong shape", raw: `{"type":"send","conversation_id":"one","msg_id":"` + id + `","body":"b"}`, msgID: id},
		{name: "edit with a NUL", raw: `{"type":"edit","change_id":"` + id + `","conversation_id":1,"seq":1,"body":"\u0000"}`, changeID: id},
		{name: "react of the wrong shape", raw: `{"type":"react","change_id":"` + id + `","conversation_id":1,"seq":"1"}`, changeID: id},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, serverOpts{})
			c := ts.dial(1)
			mt := websocket.TextMessage
			if tc.binary {
				mt = websocket.BinaryMessage
			}
			require.NoError(t, c.conn.WriteMessage(mt, []byte(tc.raw)))
			f := c.next()
			require.Equal(t, protocol.FrameError, f.Type)
			require.Equal(t, protocol.CodeBadRequest, f.Code)
			require.Equal(t, tc.msgID, f.MsgID)
			require.Equal(t, tc.changeID, f.ChangeID)
			require.Contains(t, f.ErrorMessage(), tc.inMessage)
			// Still open, and the hello still to come.
			c.write(map[string]any{"type": "ping"})
			require.Equal(t, protocol.FramePong, c.next().Type)
			c.hello(0, nil)
			require.Equal(t, protocol.FrameWelcome, c.next().Type)
			require.Zero(t, ts.sender.called(), "nothing sent")
		})
	}
}

// TestFrameTooBig: a client frame over MaxFrameBytes closes with 1009.
func TestFrameTooBig(t *testing.T) {
	ts := newTestServer(t, serverOpts{cfg: Config{MaxFrameBytes: 256}})
	c := ts.dial(1)
	c.write(map[string]any{"type": "ping", "pad": strings.Repeat("x", 300)})
	code, _ := c.closed()
	require.Equal(t, websocket.CloseMessageTooBig, code)
}

// TestTyping: a typing frame goes to Deps.Ephemeral with its state; a
// bad one and a refused one are answered with an error frame, the
// connection staying open; without Ephemeral typing frames are ignored.
func TestTyping(t *testing.T) {
	ts := newTestServer(t, serverOpts{ephemeral: true})
	c := ts.dial(3)
	<-ts.eph.joins
	c.hello(0, nil)
	require.Equal(t, protocol.FrameWelcome, c.next().Type)

	c.write(protocol.Typing{Type: protocol.FrameTyping, ConversationID: 10})
	require.Equal(t, typingCall{user: 3, cid: 10}, <-ts.eph.typings)
	c.write(protocol.Typing{Type: protocol.FrameTyping, ConversationID: 10, State: protocol.TypingStart})
	require.Equal(t, typingCall{user: 3, cid: 10}, <-ts.eph.typings)
	c.write(protocol.Typing{Type: protocol.FrameTyping, ConversationID: 10, State: protocol.TypingStop})
	require.Equal(t, typingCall{user: 3, cid: 10, stop: true}, <-ts.eph.typings)

	for _, bad := range []map[string]any{
		{"type": "typing"},
		{"type": "typing", "conversation_id": -2},
		{"type": "typing", "conversation_id": 10, "state": "maybe"},
	} {
		c.write(bad)
		f := c.next()
		require.Equal(t, protocol.FrameError, f.Type, "%v", bad)
		require.Equal(t, protocol.CodeBadRequest, f.Code, "%v", bad)
	}
	require.Empty(t, ts.eph.typings, "bad frames do not reach the service")

	ts.eph.failTyping(errNotMember)
	c.write(protocol.Typing{Type: protocol.FrameTyping, ConversationID: 11})
	<-ts.eph.typings
	f := c.next()
	require.Equal(t, protocol.FrameError, f.Type)
	require.Equal(t, protocol.CodeNotMember, f.Code)
	require.Zero(t, f.ConversationID)

	// Without Ephemeral: no answer at all (the pong is the next reply).
	plain := newTestServer(t, serverOpts{})
	c = plain.dial(3)
	c.write(protocol.Typing{Type: protocol.FrameTyping, ConversationID: 10})
	c.write(map[string]any{"type": "ping"})
	require.Equal(t, protocol.FramePong, c.next().Type)
}

// TestEphemeralFrames: a session joins Deps.Ephemeral as it opens; the
// typing and presence frames delivered to it are refused before its
// welcome (never before it in the stream) and when they would fill more
// than half the queue, queued after the welcome otherwise; its end leaves.
func TestEphemeralFrames(t *testing.T) {
	ts := newTestServer(t, serverOpts{ephemeral: true, cfg: Config{QueueBytes: 2048}})
	ts.db.appendMessages(4, 10, 1)
	c := ts.dial(4)
	j := <-ts.eph.joins
	require.Equal(t, int64(4), j.user)
	typing := []byte(`{"type":"typing","conversation_id":10,"user_id":9,"state":"start","expires_in_ms":6000}`)
	require.False(t, j.deliver(protocol.FrameTyping, typing), "before the hello")

	release := make(chan struct{})
	ts.db.holdSyncs(release)
	c.hello(0, nil)
	s := ts.session(4)
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.state == stateHello
	}, wait, time.Millisecond)
	require.False(t, j.deliver(protocol.FrameTyping, typing), "while the hello is read")
	close(release)
	require.Equal(t, protocol.FrameWelcome, c.next().Type)
	require.Equal(t, []int64{1}, seqs(c.next()))
	require.True(t, j.deliver(protocol.FrameTyping, typing))
	f := c.next()
	require.Equal(t, protocol.FrameTyping, f.Type)
	require.Equal(t, string(typing), f.raw)
	require.False(t, j.deliver(protocol.FramePresence, make([]byte, 1025)), "over half the queue")

	select {
	case <-j.left:
		t.Fatal("left while open")
	default:
	}
	require.NoError(t, c.conn.Close())
	select {
	case <-j.left:
	case <-time.After(wait):
		t.Fatal("the session did not leave")
	}
}
