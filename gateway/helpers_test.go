package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/s3test"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/protocol"
)

func TestMain(m *testing.M) { os.Exit(s3test.Run(func() int { return pgtest.Run(m) })) }

var testSecret = []byte("gateway-test-secret-0123456789")

// tgw is one test's running world: PostgreSQL, kfake, fanout, a gateway with
// its hub listening, and an httptest server in front of it.
type tgw struct {
	env *testenv.Env
	g   *Gateway
	srv *httptest.Server
	url string
	hc  *http.Client
	// stopFanout stops the world's fanout (before a replay).
	stopFanout func()
}

// newGateway starts everything; tweak adjusts the gateway config (tests
// default to generous rates and a long ack wait, so that a loaded 2-core
// machine still answers 201).
func newGateway(t testing.TB, tweak func(*Config)) *tgw {
	t.Helper()
	tg := buildGateway(t, tweak)
	startListen(t, tg.g)
	tg.srv = httptest.NewServer(tg.g.Handler())
	tg.url = tg.srv.URL
	t.Cleanup(func() {
		tg.g.Drain()
		tg.hc.CloseIdleConnections()
		tg.srv.Close()
	})
	return tg
}

// buildGateway makes the world and the gateway without serving it.
func buildGateway(t testing.TB, tweak func(*Config)) *tgw {
	t.Helper()
	env := testenv.New(t, testenv.Options{})
	stop := env.StartFanout(t)
	g, err := NewOn(wsTestConfig(env, tweak), placementOf(env), env.Producer)
	require.NoError(t, err)
	return &tgw{env: env, g: g, stopFanout: stop,
		hc: &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
}

// serve runs g.Serve (HTTP server and hub) on a loopback listener until
// stop, which returns Serve's result.
func (tg *tgw) serve(t testing.TB) (stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	tg.url = "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tg.g.Serve(ctx, ln) }()
	var once sync.Once
	var result error
	stop = func() error {
		once.Do(func() {
			cancel()
			result = <-done
			tg.hc.CloseIdleConnections()
		})
		return result
	}
	t.Cleanup(func() { _ = stop() })
	waitFor(t, 30*time.Second, "LISTEN connection", func() bool { return tg.g.hub.Connected() })
	return stop
}

// startListen runs g.Listen until the test ends and waits for the LISTEN
// connection.
func startListen(t testing.TB, g *Gateway) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Listen(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	waitFor(t, 30*time.Second, "LISTEN connection", func() bool { return g.hub.Connected() })
}

// waitFor polls cond until it holds (testenv.WaitFor).
var waitFor = testenv.WaitFor

// user is a client of one user.
type user struct {
	tg    *tgw
	id    int64
	token string
}

func (tg *tgw) user(t testing.TB, id int64) *user {
	t.Helper()
	tok, err := IssueToken(testSecret, id, time.Hour)
	require.NoError(t, err)
	return &user{tg: tg, id: id, token: tok}
}

type resp struct {
	status int
	header http.Header
	body   []byte
	close  bool // the server asked to close the connection
}

func (r resp) decode(t testing.TB, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.body, v), "body %s", r.body)
}

func (r resp) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// do sends one request; body is JSON-encoded unless it is []byte or a
// string. hdr are header name/value pairs.
func (u *user) do(t testing.TB, method, path string, body any, hdr ...string) resp {
	t.Helper()
	r, err := u.doE(method, path, body, hdr...)
	require.NoError(t, err)
	return r
}

// doE is do for goroutines other than the test's: it returns the error.
func (u *user) doE(method, path string, body any, hdr ...string) (resp, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return resp{}, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, u.tg.url+path, rd)
	if err != nil {
		return resp{}, err
	}
	if u.token != "" {
		req.Header.Set("Authorization", "Bearer "+u.token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := u.tg.hc.Do(req)
	if err != nil {
		return resp{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return resp{}, err
	}
	if method != http.MethodGet && res.StatusCode/100 == 2 && !bytes.Contains(raw, []byte(`"pending"`)) {
		// On several servers, the other members' entries of what was
		// written follow its answer by a hop (testenv.Env.Settle); a
		// test whose stages are stopped goes on after the bound.
		u.tg.env.Settle(5 * time.Second)
	}
	return resp{status: res.StatusCode, header: res.Header, body: raw, close: res.Close}, nil
}

// The wire shapes are package protocol's, decoded as a client does.

// msgText is the body of a text message (a protocol.Message or a pointer
// to one).
func msgText(t testing.TB, m any) string {
	t.Helper()
	var s string
	require.NoError(t, json.Unmarshal(msgOf(t, m).Body, &s))
	return s
}

// msgSystem is the body of a system message.
func msgSystem(t testing.TB, m any) map[string]any {
	t.Helper()
	var v map[string]any
	body := msgOf(t, m).Body
	require.NoError(t, json.Unmarshal(body, &v), "system body %s", body)
	return v
}

func msgOf(t testing.TB, m any) *protocol.Message {
	t.Helper()
	switch m := m.(type) {
	case protocol.Message:
		return &m
	case *protocol.Message:
		require.NotNil(t, m, "no message")
		return m
	}
	t.Fatalf("%T is no message", m)
	return nil
}

// create makes a conversation and returns its id.
func (u *user) create(t testing.TB, title string, members ...int64) int64 {
	t.Helper()
	cid, err := u.createE(title, members...)
	require.NoError(t, err)
	return cid
}

func (u *user) createE(title string, members ...int64) (int64, error) {
	if members == nil {
		members = []int64{}
	}
	r, err := u.doE("POST", "/v1/conversations", map[string]any{"title": title, "members": members})
	if err != nil {
		return 0, err
	}
	if r.status != http.StatusCreated {
		return 0, fmt.Errorf("create: %s", r)
	}
	var out protocol.ConversationCreated
	if err := json.Unmarshal(r.body, &out); err != nil || out.ConversationID <= 0 {
		return 0, fmt.Errorf("create: %s", r)
	}
	return out.ConversationID, nil
}

// send sends a text and returns the projected message (201 required).
func (u *user) send(t testing.TB, cid int64, body string) protocol.Message {
	t.Helper()
	m, err := u.sendE(cid, body)
	require.NoError(t, err)
	return m
}

func (u *user) sendE(cid int64, body string) (protocol.Message, error) {
	r, err := u.doE("POST", fmt.Sprintf("/v1/conversations/%d/messages", cid),
		map[string]any{"msg_id": uuid.NewString(), "body": body})
	if err != nil {
		return protocol.Message{}, err
	}
	if r.status != http.StatusCreated {
		return protocol.Message{}, fmt.Errorf("send to %d: %s", cid, r)
	}
	var m protocol.Message
	if err := json.Unmarshal(r.body, &m); err != nil {
		return protocol.Message{}, fmt.Errorf("send to %d: %s", cid, r)
	}
	return m, nil
}

// sync is one GET /v1/sync that must answer 200.
func (u *user) sync(t testing.TB, query string) protocol.SyncAnswer {
	t.Helper()
	r := u.do(t, "GET", "/v1/sync?"+query, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var s protocol.SyncAnswer
	r.decode(t, &s)
	return s
}

// syncAll pages from after to the head; it fails on a too-long answer.
func (u *user) syncAll(t testing.TB, after int64, limit int) (entries []protocol.Entry, head int64, requests int) {
	t.Helper()
	for {
		s := u.sync(t, "after="+strconv.FormatInt(after, 10)+"&limit="+strconv.Itoa(limit))
		requests++
		require.False(t, s.TooLong)
		entries = append(entries, s.Entries...)
		if len(s.Entries) > 0 {
			after = s.Entries[len(s.Entries)-1].InboxSeq
		}
		if !s.HasMore {
			return entries, s.Head, requests
		}
	}
}

// parallel runs n jobs on workers goroutines and fails the test with the
// first error.
func parallel(t testing.TB, n, workers int, job func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	ch := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ch {
				if err := job(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		ch <- i
	}
	close(ch)
	wg.Wait()
	require.NoError(t, first)
}

// verify checks the projector's invariants.
func (tg *tgw) verify(t testing.TB) {
	t.Helper()
	tg.env.Verify(t)
}

// requireContiguous checks that entries continue after `after` with no gap
// and no repeat.
func requireContiguous(t testing.TB, after int64, entries []protocol.Entry) {
	t.Helper()
	for i, e := range entries {
		require.Equal(t, after+int64(i)+1, e.InboxSeq, "entry %d", i)
	}
}

func decodeInto(raw []byte, v any) error { return json.Unmarshal(raw, v) }

// deafGateway serves a gateway whose LISTEN connection deafen cuts and keeps
// from coming back until hear: notifications sent in between are lost.
func deafGateway(t testing.TB) (tg *tgw, deafen, hear func()) {
	t.Helper()
	tg = buildGateway(t, func(c *Config) {
		c.ListenBackoffMax = 50 * time.Millisecond
		c.AckWait = 500 * time.Millisecond
	})
	gate := make(chan struct{})
	var gated sync.Mutex
	blocking := false
	tg.g.beforeConnect = func(ctx context.Context) {
		gated.Lock()
		b := blocking
		gated.Unlock()
		if b {
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
	}
	tg.serve(t)
	var once sync.Once
	hear = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(hear)
	deafen = func() {
		gated.Lock()
		blocking = true
		gated.Unlock()
		_, err := tg.env.Pool.Exec(context.Background(),
			`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'inboxd-gateway-listen'`)
		require.NoError(t, err)
		waitFor(t, 30*time.Second, "LISTEN connection to drop", func() bool { return !tg.g.hub.Connected() })
	}
	return tg, deafen, hear
}

// placementOf is env's placement: one server, or the servers of
// INBOXD_TEST_PG_SERVERS.
func placementOf(env *testenv.Env) Placement {
	return Placement{Pools: env.Pools, Map: env.Map, Partitions: env.Partitions}
}

// teachEpochs syncs a user of each server, so that the reader knows every
// server's epoch, the key under which a send's answer is cached (with one
// server, any sync taught it).
func (tg *tgw) teachEpochs(t testing.TB) {
	t.Helper()
	for _, pool := range tg.env.Pools {
		u := int64(1_000_001)
		for tg.env.UserPool(u) != pool {
			u++
		}
		tg.user(t, u).sync(t, "")
	}
}
