package ws

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/ratelimit"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// The test harness: a Server over fakes of everything Deps holds (an
// in-memory inbox behind inbox.Reader, a hub whose LISTEN connection is a
// fake server, fakes of the gateway's interfaces), served by httptest
// through connections whose writes a test can hold (a client that does
// not read), and real WebSocket clients.

// quiet is the logger of the servers and hubs of these tests: what they
// log is what the tests check, or the noise of a fault they inject.
var quiet = slog.New(slog.DiscardHandler)

// wait bounds every wait of these tests for something that must happen;
// nothing here is timed.
const wait = 10 * time.Second

type serverOpts struct {
	cfg        Config
	tooLongLag int64
	// listen runs the hub on a fakeListen, so that tests can notify.
	listen    bool
	ephemeral bool
	admission *fakeAdmission
	// connectLimits and sendLimits default to unlimited.
	connectLimits, sendLimits *ratelimit.Limiters
	// noRun leaves Run not started.
	noRun bool
}

type testServer struct {
	t        *testing.T
	ws       *Server
	db       *fakeDB
	reader   *inbox.Reader
	hub      *hub.Hub
	listen   *fakeListen
	sender   *fakeSender
	changer  *fakeChanger
	rebaser  *fakeRebaser
	eph      *fakeEphemeral
	draining chan struct{}
	http     *httptest.Server
	accepted chan *gateConn
	stop     func() // ends Run (idempotent)
}

func newTestServer(t *testing.T, o serverOpts) *testServer {
	t.Helper()
	noSessionGoroutinesAtEnd(t)
	ts := &testServer{t: t, db: newFakeDB(), rebaser: &fakeRebaser{},
		sender: &fakeSender{calls: make(chan sendCall, 64)}, changer: &fakeChanger{calls: make(chan changeCall, 64)},
		draining: make(chan struct{}), accepted: make(chan *gateConn, 64)}
	ts.reader = inbox.New(ts.db, inbox.Config{TooLongLag: o.tooLongLag})
	ts.hub = hub.New(hub.Config{WakeJitter: -1, Logger: quiet})
	if o.listen {
		ts.listen = newFakeListen()
		// The hub wakes every waiter once it listens (notifications may
		// have been lost before): a probe's wake-up says that it is done
		// with that, so that it wakes no session of the test.
		probe := ts.hub.SubscribeUser(-1)
		hctx, hcancel := context.WithCancel(context.Background())
		hdone := make(chan error, 1)
		go func() { hdone <- ts.hub.Run(hctx, projection.DefaultChannel, 50*time.Millisecond, ts.listen.connect) }()
		t.Cleanup(func() {
			hcancel()
			require.NoError(t, <-hdone)
		})
		select {
		case ch := <-ts.listen.listening:
			require.Equal(t, projection.DefaultChannel, ch)
		case <-time.After(wait):
			t.Fatal("the hub did not LISTEN")
		}
		select {
		case <-probe.C():
			probe.Close()
		case <-time.After(wait):
			t.Fatal("the hub did not wake its waiters")
		}
	}
	unlimited := func() *ratelimit.Limiters { return ratelimit.New(rate.Inf, 1) }
	deps := Deps{Inbox: ts.reader, Hub: ts.hub, Auth: fakeAuth{}, Sender: ts.sender, Changer: ts.changer,
		Rebaser: ts.rebaser, ConnectLimits: o.connectLimits, SendLimits: o.sendLimits, Draining: ts.draining, Logger: quiet}
	if deps.ConnectLimits == nil {
		deps.ConnectLimits = unlimited()
	}
	if deps.SendLimits == nil {
		deps.SendLimits = unlimited()
	}
	if o.ephemeral {
		ts.eph = newFakeEphemeral()
		deps.Ephemeral = ts.eph
	}
	if o.admission != nil {
		deps.Admission = o.admission
	}
	var err error
	ts.ws, err = New(o.cfg, deps)
	require.NoError(t, err)

	ts.http = httptest.NewUnstartedServer(ts.ws)
	ts.http.Listener = &gateListener{Listener: ts.http.Listener, accepted: ts.accepted}
	ts.http.Start()
	t.Cleanup(ts.http.Close)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var once sync.Once
	ts.stop = func() {
		once.Do(func() {
			cancel()
			if !o.noRun {
				require.NoError(t, <-done)
			}
		})
	}
	t.Cleanup(ts.stop)
	if !o.noRun {
		go func() { done <- ts.ws.Run(ctx) }()
		require.Eventually(t, ts.ws.Running, wait, time.Millisecond)
	}
	return ts
}

// noSessionGoroutinesAtEnd checks, once the test and its cleanups are
// done (registered first, it runs last), that no goroutine of a session,
// the pusher or the large index is left.
func noSessionGoroutinesAtEnd(t *testing.T) {
	t.Helper()
	if _, done := goroutineChecks.LoadOrStore(t, true); done {
		return // the test's first server checks, after every server stopped
	}
	t.Cleanup(func() {
		goroutineChecks.Delete(t)
		var left string
		ok := assertEventually(func() bool {
			buf := make([]byte, 1<<20)
			stacks := string(buf[:runtime.Stack(buf, true)])
			left = ""
			for _, g := range strings.Split(stacks, "\n\n") {
				for _, f := range []string{"ws.(*session).", "ws.(*pusher).", "ws.(*largeIndex).run", "ws.(*laneSet).run"} {
					if strings.Contains(g, f) {
						left += g + "\n\n"
						break
					}
				}
			}
			return left == ""
		})
		if !ok {
			t.Errorf("goroutines left:\n%s", left)
		}
	})
}

// goroutineChecks are the tests that check their goroutines at their end.
var goroutineChecks sync.Map

// assertEventually polls cond until it holds or wait passes.
func assertEventually(cond func() bool) bool {
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// url is the WebSocket URL of the server.
func (ts *testServer) url() string { return "ws" + strings.TrimPrefix(ts.http.URL, "http") + "/v1/ws" }

// dial connects as user.
func (ts *testServer) dial(user int64) *client {
	ts.t.Helper()
	c, _, err := ts.dialHeader(http.Header{"Authorization": {fmt.Sprintf("Bearer %d", user)}})
	require.NoError(ts.t, err)
	return c
}

// open dials user and waits for its session to be registered (the
// handshake's answer comes first).
func (ts *testServer) open(user int64) *client {
	ts.t.Helper()
	c := ts.dial(user)
	ts.session(user)
	return c
}

// dialURL is a WebSocket handshake with url.
func dialURL(url string, h http.Header) (*websocket.Conn, *http.Response, error) {
	return websocket.DefaultDialer.Dial(url, h)
}

// dialHeader connects with the request headers h.
func (ts *testServer) dialHeader(h http.Header) (*client, *gateConn, error) {
	conn, _, err := dialURL(ts.url(), h)
	var gc *gateConn
	select {
	case gc = <-ts.accepted:
	case <-time.After(wait):
		ts.t.Fatal("no connection accepted")
	}
	if err != nil {
		return nil, gc, err
	}
	c := &client{t: ts.t, conn: conn}
	conn.SetPingHandler(func(data string) error {
		c.pings.Add(1)
		return conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	ts.t.Cleanup(func() { _ = conn.Close() })
	return c, gc, nil
}

// session is the server's session of user (the only one).
func (ts *testServer) session(user int64) *session {
	ts.t.Helper()
	var found *session
	require.Eventually(ts.t, func() bool {
		ts.ws.mu.Lock()
		defer ts.ws.mu.Unlock()
		for s := range ts.ws.sessions {
			if s.user == user {
				found = s
				return true
			}
		}
		return false
	}, wait, time.Millisecond)
	return found
}

// notifyHeads notifies, as the projector does, that the users' heads
// moved, announcing runs for those in runs.
func (ts *testServer) notify(heads map[int64]int64, runs map[int64]projection.Run) {
	var e projection.Encoder
	for u, h := range heads {
		e.Head(u, h)
	}
	for u, r := range runs {
		e.Run(u, r)
	}
	for _, p := range e.Payloads() {
		ts.listen.notify(projection.DefaultChannel, p)
	}
}

// runOf is the run that announces entries.
func runOf(entries []fakeEntry) projection.Run {
	r := projection.Run{First: entries[0].inboxSeq}
	for _, e := range entries {
		r.Keys = append(r.Keys, [2]int64{e.conv, e.seq})
	}
	return r
}

// client is a WebSocket client of a test.
type client struct {
	t     *testing.T
	conn  *websocket.Conn
	pings atomic.Int32
}

// frame is a server frame and its bytes.
type frame struct {
	protocol.ServerFrame
	raw string
}

func (c *client) write(v any) {
	c.t.Helper()
	require.NoError(c.t, c.conn.WriteJSON(v))
}

func (c *client) hello(after int64, epoch *int64) {
	c.t.Helper()
	c.write(map[string]any{"type": protocol.FrameHello, "after": after, "epoch": epoch})
}

// next reads the next frame; it fails the test on a close.
func (c *client) next() frame {
	c.t.Helper()
	f, err := c.read()
	require.NoError(c.t, err)
	return f
}

func (c *client) read() (frame, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(wait))
	_, b, err := c.conn.ReadMessage()
	if err != nil {
		return frame{}, err
	}
	var f frame
	f.raw = string(b)
	if err := json.Unmarshal(b, &f.ServerFrame); err != nil {
		return frame{}, err
	}
	return f, nil
}

// nextOf reads frames up to the first of type kind.
func (c *client) nextOf(kind string) frame {
	c.t.Helper()
	for {
		if f := c.next(); f.Type == kind {
			return f
		}
	}
}

// closed reads until the connection ends: the frames before the close
// and its code (-1 without a close frame).
func (c *client) closed() (code int, frames []frame) {
	c.t.Helper()
	for {
		f, err := c.read()
		if err == nil {
			frames = append(frames, f)
			continue
		}
		var ce *websocket.CloseError
		if ok := asCloseError(err, &ce); ok {
			return ce.Code, frames
		}
		var ne net.Error
		require.False(c.t, asNetTimeout(err, &ne), "the connection did not end: %v", err)
		return -1, frames
	}
}

func asCloseError(err error, ce **websocket.CloseError) bool {
	e, ok := err.(*websocket.CloseError)
	if ok {
		*ce = e
	}
	return ok
}

func asNetTimeout(err error, ne *net.Error) bool {
	e, ok := err.(net.Error)
	if ok {
		*ne = e
	}
	return ok && e.Timeout()
}

// seqs are the inbox_seqs of f's entries.
func seqs(f frame) []int64 {
	var out []int64
	for _, e := range f.Entries {
		out = append(out, e.InboxSeq)
	}
	return out
}

// gateListener hands out gateConns and tells the test of each.
type gateListener struct {
	net.Listener
	accepted chan *gateConn
}

func (l *gateListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	gc := &gateConn{Conn: c, open: true, changed: make(chan struct{}), timedOut: make(chan struct{}, 16)}
	l.accepted <- gc
	return gc, nil
}

// gateConn is the server's side of a connection whose writes a test can
// hold: a held write blocks, as one to a client that stopped reading
// once the socket buffers are full, until the gate opens or its write
// deadline passes (a timeout, reported on timedOut).
type gateConn struct {
	net.Conn
	mu       sync.Mutex
	open     bool
	deadline time.Time
	changed  chan struct{} // closed when open or deadline change
	timedOut chan struct{}
}

func (c *gateConn) setLocked(f func()) {
	f()
	close(c.changed)
	c.changed = make(chan struct{})
}

// hold makes the writes from now on block.
func (c *gateConn) hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(func() { c.open = false })
}

// release lets the writes through.
func (c *gateConn) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(func() { c.open = true })
}

func (c *gateConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.setLocked(func() { c.deadline = t })
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *gateConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.setLocked(func() { c.deadline = t })
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *gateConn) Write(b []byte) (int, error) {
	for {
		c.mu.Lock()
		open, dl, changed := c.open, c.deadline, c.changed
		c.mu.Unlock()
		if open {
			return c.Conn.Write(b)
		}
		var expired <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				select {
				case c.timedOut <- struct{}{}:
				default:
				}
				return 0, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			expired = t.C
			select {
			case <-changed:
			case <-expired:
			}
			t.Stop()
			continue
		}
		<-changed
	}
}
