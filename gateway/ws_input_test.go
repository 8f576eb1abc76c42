package gateway

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/protocol"
)

// TestWSBadHelloLikeHTTP: a hello whose after or epoch GET /v1/sync would
// refuse with 400 (negative, of the wrong type, beyond the head) closes at
// once with 1008 after an error frame with HTTP's code, bad_request; what
// HTTP accepts, the hello accepts.
func TestWSBadHelloLikeHTTP(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{HeartbeatInterval: 5 * time.Second})
	a, b := w.user(t, 1), w.user(t, 2)
	cid := a.create(t, "pair", 2)
	a.send(t, cid, "one")
	head := b.head(t)
	epoch := b.sync(t, "").Epoch

	for name, c := range map[string]struct {
		hello string // the frame
		query string // the same question over HTTP
	}{
		"negative after":  {`{"type":"hello","after":-1}`, "after=-1"},
		"negative epoch":  {fmt.Sprintf(`{"type":"hello","after":%d,"epoch":-1}`, head), fmt.Sprintf("after=%d&epoch=-1", head)},
		"epoch string":    {`{"type":"hello","after":0,"epoch":"abc"}`, "after=0&epoch=abc"},
		"after string":    {`{"type":"hello","after":"1"}`, "after=%221%22"},
		"after fraction":  {`{"type":"hello","after":1.5}`, "after=1.5"},
		"after too big":   {`{"type":"hello","after":99999999999999999999}`, "after=99999999999999999999"},
		"beyond head":     {fmt.Sprintf(`{"type":"hello","after":%d,"epoch":%d}`, head+10, epoch), fmt.Sprintf("after=%d&epoch=%d", head+10, epoch)},
		"beyond no epoch": {fmt.Sprintf(`{"type":"hello","after":%d}`, head+10), fmt.Sprintf("after=%d", head+10)},
	} {
		r := b.do(t, "GET", "/v1/sync?"+c.query, nil)
		requireError(t, r, http.StatusBadRequest, protocol.CodeBadRequest, name+" over HTTP")

		cl := dialWS(t, w, b)
		require.NoError(t, cl.conn.WriteMessage(1, []byte(c.hello)), name)
		start := time.Now()
		code, frames := cl.closeCode(t)
		require.Equal(t, protocol.CloseProtocol, code, name)
		require.Less(t, time.Since(start), 5*time.Second, "%s: closed at once, not by a timeout", name)
		require.Len(t, frames, 1, "%s: %+v", name, frames)
		require.Equal(t, protocol.FrameError, frames[0].Type, name)
		require.Equal(t, protocol.CodeBadRequest, frames[0].Code, name)
		require.False(t, frames[0].Retryable, name)
	}

	// The good ones still answer: epoch 0 (given), after at the head.
	for _, hello := range []string{fmt.Sprintf(`{"type":"hello","after":%d,"epoch":0}`, head),
		fmt.Sprintf(`{"type":"hello","after":%d,"epoch":%d}`, head, epoch), `{"type":"hello","epoch":null}`} {
		cl := dialWS(t, w, b)
		require.NoError(t, cl.conn.WriteMessage(1, []byte(hello)))
		require.Equal(t, protocol.FrameWelcome, cl.next(t).Type, hello)
		_ = cl.conn.Close()
	}
	waitFor(t, 30*time.Second, "sessions to end", func() bool { return w.ws.Sessions() == 0 })
}

// TestWSStoppedReaderGets4008: a client that stops reading altogether is
// closed with 4008 (too slow) as the protocol says, not dropped with 1006:
// when its write times out the server keeps the rest of the frame, appends
// the close frame and gives both WriteTimeout to go out. The client, reading
// again, finds every frame whole, contiguous, then the 4008, and catches up
// by reconnecting with its cursor.
func TestWSStoppedReaderGets4008(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	w := newWSGatewayOn(t, env, wsOpts{
		ws: WSConfig{HeartbeatInterval: 5 * time.Second, QueueBytes: 16 << 10, PushBatch: 4,
			SlowTimeout: time.Hour, WriteTimeout: 3 * time.Second},
		wrapLn: func(l net.Listener) net.Listener { return smallSndbufListener{l} }})
	a, s := w.user(t, 1), w.user(t, 3)
	cid := a.create(t, "busy", 3)
	body := strings.Repeat("x", 3000)

	c, err := dialWSE(w.wsURL(), http.Header{"Authorization": {"Bearer " + s.token}}, smallRcvbufDialer)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.conn.Close() })
	r := &rawReader{c: c, cursor: s.head(t)}
	c.hello(t, r.cursor, nil)
	f, err := r.read(t)
	require.NoError(t, err)
	require.Equal(t, protocol.FrameWelcome, f.Type)

	// The client reads nothing more while messages flow, until the
	// server's write has timed out.
	closes := wsMetric(w.ws, "slow_closes_total", "write_timeout")
	for i := 0; stalledWrites(w.ws, 500*time.Millisecond) == 0; i++ {
		require.Less(t, i, 1000, "no write blocked")
		a.send(t, cid, body)
	}
	waitFor(t, 30*time.Second, "the write timeout", func() bool { return counterValue(closes) == 1 })
	ok, code := r.readUntil(t, 1<<62)
	require.False(t, ok)
	require.Equal(t, protocol.CloseTooSlow, code, "a stopped reader is closed with 4008, its frames whole")
	require.Positive(t, r.n)

	again := dialWS(t, w, s).stream(t, r.cursor, nil)
	again.waitCursor(t, s.head(t))
}
