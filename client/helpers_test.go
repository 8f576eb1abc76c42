package client_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/client"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/testworld"
)

var testSecret = []byte("client-test-secret-0123456789abcdef")

// world is one test's server side: PostgreSQL, kfake, fanout and a gateway
// (HTTP API, hub, WebSocket endpoint) on a loopback socket.
type world struct {
	env *testenv.Env
	g   *gateway.Gateway
	ws  *gateway.WebSocket
	url string
}

// newWorld starts everything; tweak adjusts the gateway config. Tests use
// generous rates and a long ack wait, so that a loaded machine still
// answers 201 (202 pending is exercised by its own test).
func newWorld(t testing.TB, tweak func(*gateway.Config), wsTweak func(*gateway.WSConfig)) *world {
	t.Helper()
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	return serveWorld(t, env, tweak, wsTweak)
}

// serveWorld serves a gateway (tests' settings, adjusted by tweak and
// wsTweak) on env.
func serveWorld(t testing.TB, env *testenv.Env, tweak func(*gateway.Config), wsTweak func(*gateway.WSConfig)) *world {
	t.Helper()
	cfg := gateway.Config{
		AuthSecret: testSecret,
		DevMode:    true,
		AckWait:    10 * time.Second,
		SendRate:   rate.Inf,
		SyncRate:   rate.Inf,
		SendBurst:  1000,
		SyncBurst:  1000,
		Logger:     env.Logger,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	wcfg := gateway.WSConfig{HeartbeatInterval: 500 * time.Millisecond}
	if wsTweak != nil {
		wsTweak(&wcfg)
	}
	gw := testworld.Serve(t, env, cfg, wcfg)
	return &world{env: env, g: gw.G, ws: gw.WS, url: gw.URL}
}

// noClientGoroutines registers a check, run after every other cleanup of
// the test (servers, proxies, clients), that no goroutine of the client
// package is left.
func noClientGoroutines(t testing.TB) {
	t.Helper()
	t.Cleanup(func() {
		var stacks string
		deadline := time.Now().Add(10 * time.Second)
		for {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			var left []string
			for _, g := range strings.Split(string(buf), "\n\n") {
				if strings.Contains(g, "inboxd/client.") {
					left = append(left, g)
				}
			}
			if len(left) == 0 {
				return
			}
			stacks = strings.Join(left, "\n\n")
			if time.Now().After(deadline) {
				t.Errorf("client goroutines left after the test:\n%s", stacks)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// token is a valid token of user.
func (w *world) token(t testing.TB, user int64) string {
	t.Helper()
	tok, err := gateway.IssueToken(testSecret, user, time.Hour)
	require.NoError(t, err)
	return tok
}

// direct is a client of user talking to the gateway without faults, not
// running: for setting up conversations and sending traffic.
func (w *world) direct(t testing.TB, user int64) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{BaseURL: w.url, Token: w.token(t, user), Logger: w.env.Logger})
	require.NoError(t, err)
	return c
}

// waitFor polls cond until it holds (testenv.WaitFor).
var waitFor = testenv.WaitFor

// app is what a test app records from its client.
type app struct {
	mu        sync.Mutex
	entries   []client.Entry
	tooLongs  []client.TooLong
	convLists [][]client.Record
	history   map[int64][]client.Message
	results   map[string]client.SendResult
	statuses  []client.Status
	failAt    int64 // OnEntry fails for this inbox_seq (once), when set
	updates   []client.Message
	// states are the message states handed over, in delivery order: the
	// messages of OnEntry, OnHistory and OnUpdate.
	states []client.Message
}

func newApp() *app {
	return &app{history: map[int64][]client.Message{}, results: map[string]client.SendResult{}}
}

var errAppFailed = errors.New("the app failed (injected)")

func (a *app) handler() client.Handler {
	return client.Handler{
		OnEntry: func(_ context.Context, e client.Entry) error {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.failAt != 0 && e.InboxSeq == a.failAt {
				a.failAt = 0
				return errAppFailed
			}
			a.entries = append(a.entries, e)
			if e.Kind == client.KindMessage {
				a.states = append(a.states, *e.Message)
			}
			return nil
		},
		OnUpdate: func(_ context.Context, m client.Message) error {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.updates = append(a.updates, m)
			a.states = append(a.states, m)
			return nil
		},
		OnTooLong: func(_ context.Context, tl client.TooLong) error {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.tooLongs = append(a.tooLongs, tl)
			return nil
		},
		OnConversations: func(_ context.Context, recs []client.Record) error {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.convLists = append(a.convLists, recs)
			return nil
		},
		OnHistory: func(_ context.Context, cid int64, msgs []client.Message) error {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.history[cid] = append(a.history[cid], msgs...)
			a.states = append(a.states, msgs...)
			return nil
		},
		OnSendResult: func(_ context.Context, r client.SendResult) {
			a.mu.Lock()
			defer a.mu.Unlock()
			if _, dup := a.results[r.MsgID]; dup {
				panic("send result reported twice: " + r.MsgID)
			}
			a.results[r.MsgID] = r
		},
		OnStatus: func(s client.Status) {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.statuses = append(a.statuses, s)
		},
	}
}

func (a *app) snapshot() []client.Entry {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]client.Entry(nil), a.entries...)
}

func (a *app) lastSeq() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.entries) == 0 {
		return 0
	}
	return a.entries[len(a.entries)-1].InboxSeq
}

// config is a client config of user through url (the gateway or a proxy),
// with the waits shrunk for tests: the algorithms are the same, the
// constants smaller.
func (w *world) config(t testing.TB, url string, user int64, a *app) client.Config {
	t.Helper()
	return client.Config{
		BaseURL:          url,
		Token:            w.token(t, user),
		Handler:          a.handler(),
		Logger:           w.env.Logger.With("user_id", user),
		StartupJitter:    50 * time.Millisecond,
		BackoffInitial:   20 * time.Millisecond,
		BackoffMax:       300 * time.Millisecond,
		StablePeriod:     2 * time.Second,
		BreakerThreshold: 12,
		BreakerCooldown:  300 * time.Millisecond,
		WSFallbackAfter:  3,
		PollingPeriod:    2 * time.Second,
		LongPollWait:     2 * time.Second,
		GapWait:          100 * time.Millisecond,
		HeadWait:         300 * time.Millisecond,
		RequestTimeout:   5 * time.Second,
		SendTimeout:      3 * time.Second,
		PendingRecheck:   200 * time.Millisecond,
	}
}

// running is a client whose Run is under way.
type running struct {
	c    *client.Client
	app  *app
	stop func() error // cancels Run and returns its result
	done chan error   // Run's result, when it ended by itself
}

// start runs c until stop or the test's end.
func start(t testing.TB, c *client.Client, a *app) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	r := &running{c: c, app: a, done: done}
	var once sync.Once
	var result error
	r.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(30 * time.Second):
				result = fmt.Errorf("Run did not return within 30s of its cancellation")
			}
		})
		return result
	}
	t.Cleanup(func() { _ = r.stop() })
	return r
}

// ended returns Run's result if it ended by itself.
func (r *running) ended() (error, bool) {
	select {
	case err := <-r.done:
		r.done <- err
		return err, true
	default:
		return nil, false
	}
}

// truth is the server's inbox of a user: (inbox_seq, conversation, kind,
// seq) in order, read from PostgreSQL.
type truthEntry struct {
	inboxSeq, conv int64
	kind           int16
	seq            int64
}

func (w *world) inbox(t testing.TB, user int64) []truthEntry {
	t.Helper()
	rows, err := w.env.UserPool(user).Query(context.Background(),
		`SELECT inbox_seq, conversation_id, kind, seq FROM inbox WHERE user_id = $1 ORDER BY inbox_seq`, user)
	require.NoError(t, err)
	defer rows.Close()
	var out []truthEntry
	for rows.Next() {
		var e truthEntry
		require.NoError(t, rows.Scan(&e.inboxSeq, &e.conv, &e.kind, &e.seq))
		out = append(out, e)
	}
	require.NoError(t, rows.Err())
	return out
}

func (w *world) head(t testing.TB, user int64) int64 {
	t.Helper()
	var h int64
	err := w.env.UserPool(user).QueryRow(context.Background(), `SELECT COALESCE((SELECT inbox_seq FROM users WHERE id = $1), 0)`, user).Scan(&h)
	require.NoError(t, err)
	return h
}

// rowsOf returns how many messages carry msgID and the seq of one.
func (w *world) rowsOf(t testing.TB, msgID string) (n int, conv, seq int64) {
	t.Helper()
	for _, pool := range w.env.Pools { // a message is on its conversation's server
		var pn int
		var pc, ps int64
		err := pool.QueryRow(context.Background(),
			`SELECT count(*), COALESCE(min(conversation_id), 0), COALESCE(min(seq), 0) FROM messages WHERE msg_id = $1`, msgID).
			Scan(&pn, &pc, &ps)
		require.NoError(t, err)
		if pn > 0 {
			n, conv, seq = n+pn, pc, ps
		}
	}
	return n, conv, seq
}

// requireExactlyOnce checks that a delivered every entry of user's inbox
// from after+1 to the head, once each, in order, matching the server's.
func requireExactlyOnce(t testing.TB, w *world, user int64, got []client.Entry) {
	t.Helper()
	want := w.inbox(t, user)
	if len(want) != len(got) {
		have := map[int64]int{}
		for _, e := range got {
			have[e.InboxSeq]++
		}
		var missing, twice []truthEntry
		for _, tr := range want {
			switch have[tr.inboxSeq] {
			case 0:
				missing = append(missing, tr)
			case 1:
			default:
				twice = append(twice, tr)
			}
		}
		if len(missing) > 0 {
			var conv []string
			for _, tr := range want {
				if tr.conv == missing[0].conv {
					conv = append(conv, fmt.Sprintf("%d:%d", tr.inboxSeq, tr.seq))
				}
			}
			var gotConv []string
			for _, e := range got {
				if e.ConversationID == missing[0].conv && e.Message != nil {
					gotConv = append(gotConv, fmt.Sprintf("%d:%d:%s", e.InboxSeq, e.Message.Seq, e.Message.MsgID[:8]))
				}
			}
			t.Logf("inbox of conversation %d (inbox_seq:seq): %v", missing[0].conv, conv)
			t.Logf("delivered of conversation %d: %v", missing[0].conv, gotConv)
		}
		t.Fatalf("user %d: %d entries delivered, %d in the inbox; missing %+v; more than once %+v",
			user, len(got), len(want), missing, twice)
	}
	for i, e := range got {
		tr := want[i]
		require.Equal(t, tr.inboxSeq, e.InboxSeq, "user %d entry %d", user, i)
		require.Equal(t, tr.conv, e.ConversationID, "user %d inbox_seq %d", user, e.InboxSeq)
		switch tr.kind {
		case 1:
			require.Equal(t, client.KindMessage, e.Kind, "user %d inbox_seq %d", user, e.InboxSeq)
			require.NotNil(t, e.Message)
			require.Equal(t, tr.seq, e.Message.Seq, "user %d inbox_seq %d", user, e.InboxSeq)
		case 2:
			require.Equal(t, client.KindRecord, e.Kind, "user %d inbox_seq %d", user, e.InboxSeq)
		}
	}
}
