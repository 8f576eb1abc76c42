package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/events"
	wsserver "github.com/inboxd/inboxd/gateway/ws"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/protocol"
)

// wsgw is one gateway process of a test with the WebSocket endpoint
// mounted beside the HTTP API on its own server, as the lead's route table
// will have it.
type wsgw struct {
	*tgw
	ws     *WebSocket
	extra  map[string]*WebSocket
	stopWS func()
}

// wsTestConfig is the gateway configuration of the tests (buildGateway's
// and the WebSocket tests'): generous rates and ack wait.
func wsTestConfig(env *testenv.Env, tweak func(*Config)) Config {
	cfg := Config{
		AuthSecret: testSecret,
		DevMode:    true,
		AckWait:    20 * time.Second,
		SendRate:   rate.Inf,
		SyncRate:   rate.Inf,
		SendBurst:  1000,
		SyncBurst:  1000,
		Logger:     env.Logger,
		// Tests open sessions in crowds: admission is TestAdmission's.
		Reconnect: ReconnectConfig{AdmitRate: 1e6},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	return cfg
}

// wsOpts shape a gateway process of a test.
type wsOpts struct {
	tweak func(*Config)
	ws    WSConfig
	// wrapLn wraps the server's listener (socket options).
	wrapLn func(net.Listener) net.Listener
	// beforeConnect runs before each LISTEN connection attempt.
	beforeConnect func(ctx context.Context)
	// extra mounts more WebSocket endpoints with other configs (and
	// registries of their own) at these paths.
	extra map[string]WSConfig
	// routes adds handlers (the web demo) to the server's mux.
	routes func(mux *http.ServeMux)
}

// newWSGateway starts a world (PostgreSQL, kfake, fanout) and a gateway
// with its hub and WebSocket endpoint.
func newWSGateway(t testing.TB, tweak func(*Config), wcfg WSConfig) *wsgw {
	t.Helper()
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	return newWSGatewayOn(t, env, wsOpts{tweak: tweak, ws: wcfg})
}

// newWSGatewayOn starts another gateway process on env's database and
// Kafka: its own Gateway, hub (LISTEN connection), WebSocket pusher and
// HTTP server.
func newWSGatewayOn(t testing.TB, env *testenv.Env, o wsOpts) *wsgw {
	t.Helper()
	noWSGoroutinesAtEnd(t)
	g, err := NewOn(wsTestConfig(env, o.tweak), placementOf(env), env.Producer)
	require.NoError(t, err)
	g.beforeConnect = o.beforeConnect
	tg := &tgw{env: env, g: g,
		hc: &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	startListen(t, g)
	w := &wsgw{tgw: tg, extra: map[string]*WebSocket{}}
	mux := http.NewServeMux()
	mux.Handle("/", g.Handler())
	var stops []func()
	mount := func(path string, cfg WSConfig) *WebSocket {
		ws, err := g.NewWebSocket(cfg)
		require.NoError(t, err)
		wsRegistries.Store(ws, cfg.Registerer)
		t.Cleanup(func() { wsRegistries.Delete(ws) })
		mux.Handle("GET "+path, ws)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ws.Run(ctx) }()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				cancel()
				require.NoError(t, <-done)
			})
		}
		stops = append(stops, stop)
		waitFor(t, 10*time.Second, "WebSocket running", ws.Running)
		return ws
	}
	// Own registries: the test's endpoints must not collide with one the
	// gateway may build itself.
	if o.ws.Registerer == nil {
		o.ws.Registerer = prometheus.NewRegistry()
	}
	w.ws = mount("/v1/ws", o.ws)
	w.stopWS = stops[0]
	for path, cfg := range o.extra {
		if cfg.Registerer == nil {
			cfg.Registerer = prometheus.NewRegistry()
		}
		w.extra[path] = mount(path, cfg)
	}
	if o.routes != nil {
		o.routes(mux)
	}
	srv := httptest.NewUnstartedServer(mux)
	if o.wrapLn != nil {
		srv.Listener = o.wrapLn(srv.Listener)
	}
	srv.Start()
	tg.srv, tg.url = srv, srv.URL
	// Cleanups run last-in first-out: the WebSocket sessions end (1012)
	// before the server waits for its handlers.
	t.Cleanup(func() {
		tg.hc.CloseIdleConnections()
		srv.Close()
	})
	t.Cleanup(func() {
		for _, stop := range stops {
			stop()
		}
	})
	return w
}

// wsURL is the WebSocket URL of the gateway.
func (w *wsgw) wsURL() string { return w.wsURLAt("/v1/ws") }

func (w *wsgw) wsURLAt(path string) string { return "ws" + strings.TrimPrefix(w.url, "http") + path }

// wsClient is a test's WebSocket client (gorilla, as a Go SDK would be).
type wsClient struct {
	conn *websocket.Conn
	user int64
}

// dialWS connects with the token in the Authorization header (or none).
func dialWS(t testing.TB, w *wsgw, u *user) *wsClient {
	t.Helper()
	h := http.Header{}
	if u != nil && u.token != "" {
		h.Set("Authorization", "Bearer "+u.token)
	}
	c, err := dialWSE(w.wsURL(), h, nil)
	require.NoError(t, err)
	if u != nil {
		c.user = u.id
	}
	t.Cleanup(func() { _ = c.conn.Close() })
	return c
}

func dialWSE(url string, h http.Header, d *websocket.Dialer) (*wsClient, error) {
	if d == nil {
		d = &websocket.Dialer{HandshakeTimeout: 30 * time.Second}
	}
	conn, res, err := d.Dial(url, h)
	if res != nil && res.Body != nil {
		_ = res.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	return &wsClient{conn: conn}, nil
}

func (c *wsClient) writeJSON(t testing.TB, v any) {
	t.Helper()
	require.NoError(t, c.writeJSONE(v))
}

func (c *wsClient) writeJSONE(v any) error {
	_ = c.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
	return c.conn.WriteJSON(v)
}

func (c *wsClient) hello(t testing.TB, after int64, epoch *int64) {
	t.Helper()
	c.writeJSON(t, protocol.Hello{Type: protocol.FrameHello, After: after, Epoch: epoch})
}

// next reads one frame; the deadline only prevents a hang.
func (c *wsClient) next(t testing.TB) protocol.ServerFrame {
	t.Helper()
	f, err := c.nextE(60 * time.Second)
	require.NoError(t, err)
	return f
}

func (c *wsClient) nextE(timeout time.Duration) (protocol.ServerFrame, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(timeout))
	var f protocol.ServerFrame
	_, raw, err := c.conn.ReadMessage()
	if err != nil {
		return f, err
	}
	return f, json.Unmarshal(raw, &f)
}

// nextOf reads frames until one of a type other than heartbeat (and the
// typing and presence frames of others, which come whenever they do).
func (c *wsClient) nextOf(t testing.TB) protocol.ServerFrame {
	t.Helper()
	for {
		f := c.next(t)
		if f.Type != protocol.FrameHeartbeat && f.Type != protocol.FrameTyping && f.Type != protocol.FramePresence {
			return f
		}
	}
}

// closeCode reads until the connection ends and returns the close code
// (-1 when it ended without a close frame).
func (c *wsClient) closeCode(t testing.TB) (int, []protocol.ServerFrame) {
	t.Helper()
	var frames []protocol.ServerFrame
	for {
		f, err := c.nextE(60 * time.Second)
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code, frames
			}
			var ne net.Error
			require.False(t, errors.As(err, &ne) && ne.Timeout(), "no close within 60s")
			return -1, frames
		}
		frames = append(frames, f)
	}
}

// wsStream is a connected client that reads in the background and checks
// docs/protocol.md's promise as frames arrive: inbox_seqs contiguous from the
// hello's after (too_long rebases), each once.
type wsStream struct {
	c    *wsClient
	done chan struct{}

	mu         sync.Mutex
	welcome    *protocol.ServerFrame
	cursor     int64
	entries    []protocol.Entry
	tooLongs   []protocol.ServerFrame
	heartbeats int
	lastHB     int64
	others     []protocol.ServerFrame
	ephemeral  []protocol.ServerFrame // typing and presence (ws_ephemeral_test.go)
	violation  error
	closeCode  int // 0 while open, -1 without a close frame
	closeErr   error
}

// stream sends hello(after) and starts reading.
func (c *wsClient) stream(t testing.TB, after int64, epoch *int64) *wsStream {
	t.Helper()
	s := &wsStream{c: c, cursor: after, done: make(chan struct{})}
	c.hello(t, after, epoch)
	go s.read()
	t.Cleanup(func() {
		_ = c.conn.Close()
		<-s.done
	})
	return s
}

// started waits for the welcome: from then on the session takes frames
// that are not entries (receipts, typing, presence), which a session
// still reading its hello's first page drops (docs/websocket.md).
func (s *wsStream) started(t testing.TB) *wsStream {
	t.Helper()
	waitFor(t, 30*time.Second, "the welcome", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.welcome != nil
	})
	return s
}

func (s *wsStream) read() {
	defer close(s.done)
	for {
		f, err := s.c.nextE(10 * time.Minute)
		s.mu.Lock()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				s.closeCode = ce.Code
			} else {
				s.closeCode = -1
			}
			s.closeErr = err
			s.mu.Unlock()
			return
		}
		switch f.Type {
		case protocol.FrameWelcome:
			if s.welcome != nil && s.violation == nil {
				s.violation = errors.New("second welcome")
			}
			s.welcome = &f
		case protocol.FrameEntries:
			for _, e := range f.Entries {
				if e.InboxSeq != s.cursor+1 && s.violation == nil {
					s.violation = errors.New("user " + strconv.FormatInt(s.c.user, 10) + ": entry " +
						strconv.FormatInt(e.InboxSeq, 10) + " after cursor " + strconv.FormatInt(s.cursor, 10))
				}
				s.cursor = e.InboxSeq
				s.entries = append(s.entries, e)
			}
		case protocol.FrameTooLong:
			s.tooLongs = append(s.tooLongs, f)
			s.cursor = f.Head
		case protocol.FrameHeartbeat:
			s.heartbeats++
			s.lastHB = f.Head
		case protocol.FrameTyping, protocol.FramePresence:
			s.ephemeral = append(s.ephemeral, f)
		default:
			s.others = append(s.others, f)
		}
		s.mu.Unlock()
	}
}

// state returns the cursor and a copy of the entries.
func (s *wsStream) state() (int64, []protocol.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursor, append([]protocol.Entry(nil), s.entries...)
}

// waitCursor waits until the stream reached at least seq; a violation or
// an early close fails the test.
func (s *wsStream) waitCursor(t testing.TB, seq int64) {
	t.Helper()
	waitFor(t, 60*time.Second, "stream of user "+strconv.FormatInt(s.c.user, 10)+" at "+strconv.FormatInt(seq, 10), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		require.NoError(t, s.violation)
		if s.closeCode != 0 && s.cursor < seq {
			t.Fatalf("stream of user %d closed (%d, %v) at %d before %d", s.c.user, s.closeCode, s.closeErr, s.cursor, seq)
		}
		return s.cursor >= seq
	})
}

// waitOther waits for a frame other than welcome/entries/too_long/heartbeat.
func (s *wsStream) waitOther(t testing.TB, pred func(protocol.ServerFrame) bool) protocol.ServerFrame {
	t.Helper()
	var found protocol.ServerFrame
	waitFor(t, 60*time.Second, "a reply frame", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, f := range s.others {
			if pred(f) {
				found = f
				return true
			}
		}
		return false
	})
	return found
}

// waitClosed waits for the end of the connection and returns its code.
func (s *wsStream) waitClosed(t testing.TB) int {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		t.Fatal("stream not closed within 60s")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeCode
}

// head is the user's inbox head as GET /v1/sync reports it.
func (u *user) head(t testing.TB) int64 {
	t.Helper()
	return u.sync(t, "limit=1").Head
}

// requireSameEntries checks a stream's entries against the HTTP sync of
// the same range: same inbox_seqs, same messages.
func requireSameEntries(t testing.TB, want, got []protocol.Entry) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i].InboxSeq, got[i].InboxSeq, "entry %d", i)
		require.Equal(t, want[i].Kind, got[i].Kind, "entry %d", i)
		require.Equal(t, want[i].ConversationID, got[i].ConversationID, "entry %d", i)
		if want[i].Message != nil {
			require.NotNil(t, got[i].Message, "entry %d", i)
			require.Equal(t, want[i].Message.MsgID, got[i].Message.MsgID, "entry %d", i)
			require.Equal(t, want[i].Message.Seq, got[i].Message.Seq, "entry %d", i)
		}
	}
}

// appendMessage appends a message.sent straight to the log, without the
// gateway's ack wait (for phases in which the hub is deliberately deaf).
func appendMessage(t testing.TB, env *testenv.Env, sender, cid int64, body string) string {
	t.Helper()
	e := events.New(events.MessageSent, cid, sender)
	e.MsgID, e.Body = uuid.NewString(), &body
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := env.Producer.Append(ctx, e)
	require.NoError(t, err)
	return e.MsgID
}

// sessionsOf describes the gateway's sessions of user.
func sessionsOf(ws *WebSocket, user int64) []wsserver.SessionInfo {
	var out []wsserver.SessionInfo
	for _, s := range ws.Inspect() {
		if s.User == user {
			out = append(out, s)
		}
	}
	return out
}

// sessionInfo describes the session id of ws now (zero once it ended).
func sessionInfo(ws *WebSocket, id uint64) wsserver.SessionInfo {
	for _, s := range ws.Inspect() {
		if s.ID == id {
			return s
		}
	}
	return wsserver.SessionInfo{}
}

// stalledWrites counts the sessions whose current write has been blocked
// for longer than d.
func stalledWrites(ws *WebSocket, d time.Duration) int {
	n := 0
	for _, s := range ws.Inspect() {
		if s.WriteBlocked > d {
			n++
		}
	}
	return n
}

var wsRegistries sync.Map // *WebSocket -> the prometheus.Registerer of its metrics

// wsMetric is ws's metric inboxd_gateway_ws_<name> (of the label value,
// for a metric with a label), read from the registry newWSGatewayOn gave
// it: what an operator scrapes.
func wsMetric(ws *WebSocket, name string, label ...string) gatheredMetric {
	reg, _ := wsRegistries.Load(ws)
	return gatheredMetric{reg: reg.(prometheus.Gatherer), name: "inboxd_gateway_ws_" + name, label: label}
}

// gatheredMetric writes the metric as a gather finds it; one with no
// sample yet (a label value not yet counted) is zero.
type gatheredMetric struct {
	reg   prometheus.Gatherer
	name  string
	label []string
}

func (m gatheredMetric) Write(out *dto.Metric) error {
	mfs, err := m.reg.Gather()
	if err != nil {
		return err
	}
	for _, mf := range mfs {
		if mf.GetName() != m.name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			if len(m.label) > 0 && (len(mt.GetLabel()) != 1 || mt.GetLabel()[0].GetValue() != m.label[0]) {
				continue
			}
			out.Counter, out.Gauge, out.Histogram = mt.Counter, mt.Gauge, mt.Histogram
			return nil
		}
	}
	return nil
}

var wsLeakCheck sync.Map // testing.TB -> struct{}

// noWSGoroutinesAtEnd checks, after every other cleanup of the test, that
// no goroutine of the WebSocket code is left (sessions, writers, sends,
// pusher workers).
func noWSGoroutinesAtEnd(t testing.TB) {
	if _, dup := wsLeakCheck.LoadOrStore(t, struct{}{}); dup {
		return
	}
	t.Cleanup(func() {
		defer wsLeakCheck.Delete(t)
		waitFor(t, 30*time.Second, "the WebSocket goroutines to end", func() bool {
			buf := make([]byte, 1<<22)
			stacks := string(buf[:runtime.Stack(buf, true)])
			for _, fn := range []string{"gateway/ws.(*session)", "gateway/ws.(*pusher)", "gateway/ws.(*Server)"} {
				if strings.Contains(stacks, fn) {
					return false
				}
			}
			return true
		})
	})
}
