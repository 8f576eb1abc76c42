package notifier_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/testworld"
	"github.com/inboxd/inboxd/notifier"
	"github.com/inboxd/inboxd/protocol"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var (
	testSecret    = []byte("notifier-test-secret-0123456789")
	webhookSecret = []byte("webhook-secret")
)

// world is one test's PostgreSQL, kfake, fanout and gateway (HTTP and
// WebSocket, presence with a short grace), and a webhook receiver.
type world struct {
	env *testenv.Env
	url string
	rcv *receiver
}

func newWorld(t *testing.T) *world {
	t.Helper()
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	gw := testworld.Serve(t, env, gateway.Config{AuthSecret: testSecret, AckWait: 10 * time.Second,
		SendRate: rate.Inf, SyncRate: rate.Inf, SendBurst: 1000, SyncBurst: 1000, Logger: env.Logger,
		Ephemeral: gateway.EphemeralConfig{PresenceGrace: 200 * time.Millisecond, PresenceExpiry: 3 * time.Second}},
		gateway.WSConfig{})
	w := &world{env: env, url: gw.URL, rcv: newReceiver(t)}
	return w
}

// run starts a notifier in this process until the test ends.
func (w *world) run(t *testing.T, tweak func(*notifier.Config)) {
	t.Helper()
	cfg := w.config()
	if tweak != nil {
		tweak(&cfg)
	}
	// One notifier per server: on several, each consumes its server's
	// partitions and notifies of its conversations.
	var ns []*notifier.Notifier
	for i, pool := range w.env.Pools {
		scfg := cfg
		if w.env.Sharded() {
			server := w.env.Map.Servers[i].ID
			scfg.Group = fmt.Sprintf("%s.%d", cfg.Group, server)
			scfg.Servers = &notifier.Servers{Catalog: w.env.Pool, All: w.env.Pools, OfUser: w.env.UserPool,
				Owns: func(p int32) bool { return w.env.Map.Serves(p, server) }}
		}
		n, err := notifier.New(scfg, pool)
		require.NoError(t, err)
		ns = append(ns, n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, len(ns))
	for _, n := range ns {
		go func() { done <- n.Run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range ns {
			require.NoError(t, <-done)
		}
	})
	waitFor(t, 30*time.Second, "the notifiers' consumers", func() bool {
		for _, n := range ns {
			if !n.Ready() {
				return false
			}
		}
		return true
	})
}

// sum sums a count over the servers (each keeps the notifications and
// messages of its conversations).
func (w *world) sum(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var total int64
	for _, pool := range w.env.Pools {
		var n int64
		require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
		total += n
	}
	return total
}

func (w *world) config() notifier.Config {
	return notifier.Config{Brokers: w.env.Brokers, Topic: w.env.Topic, Group: "notifier-" + w.env.Topic,
		WebhookURL: w.rcv.srv.URL, WebhookSecret: webhookSecret, Delay: 300 * time.Millisecond,
		PresenceExpiry: 3 * time.Second, Logger: w.env.Logger}
}

// call makes one API request as user and decodes a 2xx answer into out.
func (w *world) call(t *testing.T, user int64, method, path string, body, out any) {
	t.Helper()
	tok, err := gateway.IssueToken(testSecret, user, time.Hour)
	require.NoError(t, err)
	raw, _ := json.Marshal(body)
	req, err := http.NewRequest(method, w.url+path, bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, 2, resp.StatusCode/100, "%s %s: %d %s", method, path, resp.StatusCode, b)
	if out != nil {
		require.NoError(t, json.Unmarshal(b, out))
	}
}

func (w *world) create(t *testing.T, by int64, members ...int64) int64 {
	var c protocol.ConversationCreated
	w.call(t, by, "POST", "/v1/conversations", map[string]any{"title": "n", "members": members}, &c)
	return c.ConversationID
}

func (w *world) send(t *testing.T, by, cid int64, body string, mentions ...int64) int64 {
	var m protocol.Message
	w.call(t, by, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid),
		map[string]any{"msg_id": uuid.NewString(), "body": body, "mentions": mentions}, &m)
	return m.Seq
}

// connect opens a WebSocket of user and waits until the gateway has
// written its connection row.
func (w *world) connect(t *testing.T, user int64) {
	t.Helper()
	tok, err := gateway.IssueToken(testSecret, user, time.Hour)
	require.NoError(t, err)
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(w.url, "http")+"/v1/ws",
		http.Header{"Authorization": {"Bearer " + tok}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.WriteJSON(map[string]any{"type": "hello", "after": 0}))
	go func() { // read until closed
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}()
	waitFor(t, 30*time.Second, "the connection row", func() bool {
		var n int
		_ = w.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM connections WHERE user_id = $1`, user).Scan(&n)
		return n > 0
	})
}

// receiver is a webhook receiver that checks every signature, keeps every
// call and answers as fail says (default 200).
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	calls  []notifier.Webhook
	raws   [][]byte // the bodies of the calls taken
	fail   func(n int) (status int, retryAfter string)
	onTake func(id string) // told of every call taken
	bad    int             // calls whose signature or key did not verify
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var n notifier.Webhook
	sig := req.Header.Get(notifier.HeaderSignature)
	ts := strings.TrimPrefix(strings.Split(sig, ",")[0], "t=")
	var unix int64
	_, _ = fmt.Sscan(ts, &unix)
	ok := json.Unmarshal(body, &n) == nil && sig == notifier.Sign(webhookSecret, time.Unix(unix, 0), body) &&
		req.Header.Get(notifier.HeaderIdempotency) == n.ID
	r.mu.Lock()
	defer r.mu.Unlock()
	if !ok {
		r.bad++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if r.fail != nil {
		if status, after := r.fail(len(r.calls)); status != 0 {
			if after != "" {
				w.Header().Set("Retry-After", after)
			}
			r.calls = append(r.calls, notifier.Webhook{}) // an attempt, not taken
			w.WriteHeader(status)
			return
		}
	}
	r.calls = append(r.calls, n)
	r.raws = append(r.raws, body)
	if r.onTake != nil {
		r.onTake(n.ID)
	}
	w.WriteHeader(http.StatusOK)
}

// taken returns the notifications taken, each id once (a receiver drops
// repeats of an id), by user.
func (r *receiver) taken() map[int64][]notifier.Webhook {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	out := map[int64][]notifier.Webhook{}
	for _, c := range r.calls {
		if c.ID == "" || seen[c.ID] {
			continue
		}
		seen[c.ID] = true
		out[c.UserID] = append(out[c.UserID], c)
	}
	for _, l := range out {
		sort.Slice(l, func(i, j int) bool { return l[i].Seq < l[j].Seq })
	}
	return out
}

// covered is the seqs (of conversation cid) user's notifications stand
// for, each range [first_seq, seq] of count messages; it fails on an
// overlap.
func covered(t *testing.T, ns []notifier.Webhook, cid int64) (seqs int) {
	t.Helper()
	last := int64(0)
	for _, n := range ns {
		if n.ConversationID != cid {
			continue
		}
		require.Greater(t, n.FirstSeq, last, "notifications overlap: %+v", ns)
		require.LessOrEqual(t, n.FirstSeq, n.Seq)
		last = n.Seq
		seqs += n.Count
	}
	return seqs
}

// waitFor polls cond until it holds (testenv.WaitFor).
var waitFor = testenv.WaitFor
