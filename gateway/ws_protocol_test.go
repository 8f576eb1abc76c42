package gateway

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// TestWSProtocol walks docs/protocol.md's WebSocket section on one world:
// authentication, origins, hello/welcome/entries, ping, send, too_long,
// caps, hello timeout, heartbeats and the 1012 of a draining gateway.
func TestWSProtocol(t *testing.T) {
	w := newWSGateway(t, func(c *Config) { c.TooLongLag = 20 }, WSConfig{
		HeartbeatInterval: 200 * time.Millisecond,
		HelloTimeout:      time.Second,
		MaxConnsPerUser:   3,
		AllowedOrigins:    nil, // same origin only
	})
	a, b := w.user(t, 1), w.user(t, 2)
	cid := a.create(t, "pair", 2)
	for i := 0; i < 3; i++ {
		a.send(t, cid, fmt.Sprintf("m%d", i))
	}
	epoch := b.sync(t, "").Epoch

	t.Run("not an upgrade", func(t *testing.T) {
		r := b.do(t, "GET", "/v1/ws", nil)
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r)
		var e protocol.ErrorBody
		r.decode(t, &e)
		require.Equal(t, protocol.CodeBadRequest, e.Error.Code)
	})

	t.Run(protocol.CodeUnauthorized, func(t *testing.T) {
		for name, h := range map[string]http.Header{
			"no token":      {},
			"bad token":     {"Authorization": {"Bearer nope"}},
			"wrong secret":  {"Authorization": {"Bearer " + mustToken(t, []byte("another-secret-0123456789"), 2)}},
			"bad query tok": nil,
		} {
			url := w.wsURL()
			if h == nil {
				url += "?access_token=garbage"
			}
			c, err := dialWSE(url, h, nil)
			require.NoError(t, err, name)
			code, frames := c.closeCode(t)
			require.Equal(t, protocol.CloseUnauthorized, code, name)
			require.Len(t, frames, 1, name)
			require.Equal(t, protocol.FrameError, frames[0].Type, name)
			require.Equal(t, protocol.CodeUnauthorized, frames[0].Code, name)
		}
	})

	t.Run("query token", func(t *testing.T) {
		c, err := dialWSE(w.wsURL()+"?access_token="+b.token, nil, nil)
		require.NoError(t, err)
		defer c.conn.Close()
		c.hello(t, 0, nil)
		f := c.next(t)
		require.Equal(t, protocol.FrameWelcome, f.Type)
	})

	t.Run("origin", func(t *testing.T) {
		h := http.Header{"Authorization": {"Bearer " + b.token}, "Origin": {"https://evil.example"}}
		c, err := dialWSE(w.wsURL(), h, nil)
		require.NoError(t, err)
		code, _ := c.closeCode(t)
		require.Equal(t, protocol.CloseNotAllowed, code)

		h.Set("Origin", w.url) // same origin
		c, err = dialWSE(w.wsURL(), h, nil)
		require.NoError(t, err)
		defer c.conn.Close()
		c.hello(t, 0, nil)
		require.Equal(t, protocol.FrameWelcome, c.next(t).Type)
	})

	t.Run("hello, catch-up, ping, send", func(t *testing.T) {
		want, head, _ := b.syncAll(t, 0, 50)
		c := dialWS(t, w, b)
		c.hello(t, 1, &epoch)
		f := c.next(t)
		require.Equal(t, protocol.FrameWelcome, f.Type)
		require.Equal(t, epoch, f.Epoch)
		require.Equal(t, head, f.Head)
		require.Equal(t, int64(200), f.HeartbeatMS)
		f = c.nextOf(t)
		require.Equal(t, protocol.FrameEntries, f.Type)
		requireSameEntries(t, want[1:], f.Entries)
		require.Equal(t, head, f.Head)

		c.writeJSON(t, map[string]any{"type": protocol.FramePing})
		require.Equal(t, protocol.FramePong, c.nextOf(t).Type)

		// A send over the socket: an ack with the seq, and the entry.
		id := uuid.NewString()
		c.writeJSON(t, map[string]any{"type": protocol.FrameSend, "conversation_id": cid, "msg_id": id, "body": "over ws"})
		var ack *protocol.ServerFrame
		var pushed *protocol.Entry
		for ack == nil || pushed == nil {
			f := c.nextOf(t)
			switch f.Type {
			case protocol.FrameSendAck:
				ack = &f
			case protocol.FrameEntries:
				require.Len(t, f.Entries, 1)
				require.Equal(t, head+1, f.Entries[0].InboxSeq)
				pushed = &f.Entries[0]
			default:
				t.Fatalf("unexpected frame %+v", f)
			}
		}
		require.Equal(t, id, ack.MsgID)
		require.Equal(t, cid, ack.ConversationID)
		require.Equal(t, pushed.Message.Seq, ack.Seq)
		require.Equal(t, id, pushed.Message.MsgID)
		require.Equal(t, "over ws", msgText(t, pushed.Message))

		// The same msg_id again: the original seq, nothing new pushed.
		c.writeJSON(t, map[string]any{"type": protocol.FrameSend, "conversation_id": cid, "msg_id": id, "body": "over ws"})
		f = c.nextOf(t)
		require.Equal(t, protocol.FrameSendAck, f.Type)
		require.Equal(t, ack.Seq, f.Seq)

		// Errors keep the connection open and name the msg_id.
		other := w.user(t, 3).create(t, "not b's")
		for _, tc := range []struct {
			frame map[string]any
			code  string
		}{
			{map[string]any{"type": protocol.FrameSend, "conversation_id": other, "msg_id": uuid.NewString(), "body": "x"}, protocol.CodeNotMember},
			{map[string]any{"type": protocol.FrameSend, "conversation_id": cid, "msg_id": "not-a-uuid", "body": "x"}, protocol.CodeBadRequest},
			{map[string]any{"type": protocol.FrameSend, "conversation_id": cid, "msg_id": uuid.NewString(), "body": ""}, protocol.CodeBadRequest},
			{map[string]any{"type": protocol.FrameSend, "conversation_id": cid, "msg_id": uuid.NewString(), "body": strings.Repeat("x", 5000)}, protocol.CodePayloadTooLarge},
			{map[string]any{"type": protocol.FrameSend, "conversation_id": 999999, "msg_id": uuid.NewString(), "body": "x"}, protocol.CodeNotFound},
			{map[string]any{"type": "dance"}, protocol.CodeBadRequest},
			{map[string]any{"type": protocol.FrameHello, "after": 0}, protocol.CodeBadRequest}, // a second hello
		} {
			c.writeJSON(t, tc.frame)
			f := c.nextOf(t)
			require.Equal(t, protocol.FrameError, f.Type, "%v", tc.frame)
			require.Equal(t, tc.code, f.Code, "%v: %s", tc.frame, f.Message)
			if id, ok := tc.frame["msg_id"].(string); ok && id != "not-a-uuid" {
				require.Equal(t, id, f.MsgID)
			}
		}
		require.NoError(t, c.conn.WriteMessage(websocket.TextMessage, []byte("{not json")))
		f = c.nextOf(t)
		require.Equal(t, protocol.FrameError, f.Type)
		require.Equal(t, protocol.CodeBadRequest, f.Code)

		// Heartbeats carry the head.
		f = c.next(t)
		for f.Type != protocol.FrameHeartbeat {
			f = c.next(t)
		}
		require.Equal(t, head+1, f.Head)
	})

	t.Run("too long", func(t *testing.T) {
		for i := 0; i < 25; i++ {
			a.send(t, cid, fmt.Sprintf("bulk %d", i))
		}
		head := b.head(t)
		stale := epoch - 1
		for name, hello := range map[string]struct {
			after int64
			epoch *int64
		}{
			"lag":          {1, &epoch},
			"stale epoch":  {head - 1, &stale},
			"lag no epoch": {2, nil},
		} {
			c := dialWS(t, w, b)
			c.hello(t, hello.after, hello.epoch)
			f := c.next(t)
			require.Equal(t, protocol.FrameWelcome, f.Type, name)
			f = c.nextOf(t)
			require.Equal(t, protocol.FrameTooLong, f.Type, name)
			require.True(t, f.TooLong, name)
			require.Equal(t, head, f.Head, name)
			require.Equal(t, epoch, f.Epoch, name)
			require.Len(t, f.Conversations, 1, name)
			require.Equal(t, cid, f.Conversations[0].ConversationID, name)
			// Live entries continue from the head.
			m := a.send(t, cid, "after too long "+name)
			f = c.nextOf(t)
			require.Equal(t, protocol.FrameEntries, f.Type, name)
			require.Equal(t, head+1, f.Entries[0].InboxSeq, name)
			require.Equal(t, m.MsgID, f.Entries[0].Message.MsgID, name)
			head++
			_ = c.conn.Close()
		}
	})

	t.Run("per-user cap", func(t *testing.T) {
		u := w.user(t, 50)
		for i := 0; i < 3; i++ {
			c := dialWS(t, w, u)
			c.hello(t, 0, nil)
			require.Equal(t, protocol.FrameWelcome, c.next(t).Type)
		}
		c := dialWS(t, w, u)
		code, frames := c.closeCode(t)
		require.Equal(t, protocol.CloseRateLimited, code)
		require.Len(t, frames, 1)
		require.Equal(t, protocol.CodeRateLimited, frames[0].Code)
		require.Positive(t, frames[0].RetryAfterMS)
	})

	t.Run("hello timeout", func(t *testing.T) {
		c := dialWS(t, w, w.user(t, 60))
		code, frames := c.closeCode(t)
		require.Equal(t, protocol.CloseProtocol, code)
		require.Len(t, frames, 1)
		require.Equal(t, protocol.FrameError, frames[0].Type)
	})

	t.Run("drain closes with 1012", func(t *testing.T) {
		c := dialWS(t, w, w.user(t, 70))
		s := c.stream(t, 0, nil)
		waitFor(t, 30*time.Second, "welcome", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.welcome != nil
		})
		w.g.Drain()
		require.Equal(t, protocol.CloseServiceRestart, s.waitClosed(t))
		// And new connections are told the same.
		c = dialWS(t, w, w.user(t, 71))
		code, _ := c.closeCode(t)
		require.Equal(t, protocol.CloseServiceRestart, code)
	})
	waitFor(t, 30*time.Second, "sessions to end", func() bool { return w.ws.Sessions() == 0 })
}

func mustToken(t testing.TB, secret []byte, user int64) string {
	t.Helper()
	tok, err := IssueToken(secret, user, time.Hour)
	require.NoError(t, err)
	return tok
}

// TestWSIdleGoroutines: an idle connection holds two goroutines, its
// reader and its hub loop, and no writer; a writer comes for each
// heartbeat (its ping, then the heartbeat frame) and ends again.
func TestWSIdleGoroutines(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{HeartbeatInterval: 300 * time.Millisecond})
	const n = 8
	clients := make([]*wsClient, n)
	for i := range clients {
		c := dialWS(t, w, w.user(t, int64(100+i)))
		c.hello(t, 0, nil)
		require.Equal(t, protocol.FrameWelcome, c.next(t).Type)
		clients[i] = c
	}
	var last string
	shape := func(what string) {
		t.Helper()
		waitFor(t, 30*time.Second, what, func() bool {
			buf := make([]byte, 1<<22)
			stacks := string(buf[:runtime.Stack(buf, true)])
			r := strings.Count(stacks, "gateway/ws.(*session).read(")
			h := strings.Count(stacks, "gateway/ws.(*session).hubLoop(")
			wr := strings.Count(stacks, "gateway/ws.(*session).writer(")
			last = fmt.Sprintf("%d readers, %d hub loops, %d writers", r, h, wr)
			return r == n && h == n && wr == 0
		})
		t.Logf("%s: %s", what, last)
	}
	shape("idle after the hello")
	for _, c := range clients {
		for beats := 0; beats < 3; {
			if f := c.next(t); f.Type == protocol.FrameHeartbeat {
				beats++
			}
		}
	}
	shape("idle after three heartbeats")
	require.Equal(t, n, w.ws.Sessions())
}
