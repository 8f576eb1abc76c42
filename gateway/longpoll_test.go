package gateway

import (
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

func (tg *tgw) pollOutcome(outcome string) int {
	return int(counterValue(tg.g.metrics.polls.WithLabelValues(outcome)))
}

func counterValue(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// TestLongPollWakesOnCommit is acceptance 4, first half: a held long-poll
// answers with the entry as soon as the commit is notified (woken, not timed
// out), for every member of a group, with the wake-ups spread in bursts.
func TestLongPollWakesOnCommit(t *testing.T) {
	tg := newGateway(t, func(c *Config) { c.WakeBurst = 3 })
	a := tg.user(t, 1)
	var others []int64
	for id := int64(100); id < 120; id++ {
		others = append(others, id)
	}
	cid := a.create(t, "big", others...)

	type answer struct {
		s   protocol.SyncAnswer
		err error
	}
	answers := make([]answer, len(others))
	var wg sync.WaitGroup
	for i, id := range others {
		u := tg.user(t, id)
		_, head, _ := u.syncAll(t, 0, 50)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := u.doE("GET", "/v1/sync?wait=30&after="+strconv.FormatInt(head, 10), nil)
			if err == nil {
				err = decodeInto(r.body, &answers[i].s)
			}
			answers[i].err = err
		}()
	}
	waitFor(t, 30*time.Second, "held polls", func() bool { return tg.g.HeldPolls() == len(others) })
	m := a.send(t, cid, "wake up")
	wg.Wait()
	for i, an := range answers {
		require.NoError(t, an.err)
		require.Len(t, an.s.Entries, 1, "poll %d", i)
		require.Equal(t, m.MsgID, an.s.Entries[0].Message.MsgID)
	}
	require.Equal(t, len(others), tg.pollOutcome("woken"))
	require.Zero(t, tg.pollOutcome("timeout"))
	require.Zero(t, tg.g.HeldPolls())
	require.Zero(t, tg.g.hub.Waiters())
}

// TestLongPollTimeout: nothing new within the wait gives 200 with no entries.
func TestLongPollTimeout(t *testing.T) {
	tg := newGateway(t, nil)
	a := tg.user(t, 1)
	a.create(t, "solo")
	_, head, _ := a.syncAll(t, 0, 50)
	s := a.sync(t, "wait=1&after="+strconv.FormatInt(head, 10))
	require.NotNil(t, s.Entries)
	require.Empty(t, s.Entries)
	require.Equal(t, head, s.Head)
	require.Equal(t, 1, tg.pollOutcome("timeout"))
}

// TestLongPollCap: beyond MaxHeldPolls a long-poll answers 503 with
// Retry-After; short polls are unaffected.
func TestLongPollCap(t *testing.T) {
	tg := newGateway(t, func(c *Config) { c.MaxHeldPolls = 2 })
	a := tg.user(t, 1)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = a.doE("GET", "/v1/sync?wait=30", nil)
		}()
	}
	waitFor(t, 30*time.Second, "held polls", func() bool { return tg.g.HeldPolls() == 2 })
	r := a.do(t, "GET", "/v1/sync?wait=30", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r)
	require.Equal(t, "2", r.header.Get("Retry-After"))
	var e protocol.ErrorBody
	r.decode(t, &e)
	require.Equal(t, protocol.CodeUnavailable, e.Error.Code)
	require.True(t, e.Error.Retryable)
	require.Equal(t, http.StatusOK, a.do(t, "GET", "/v1/sync", nil).status)
	// The polling hint grew with the load.
	s := a.sync(t, "")
	require.Equal(t, int64(5000), s.Polling.NextIntervalMS)
	tg.g.Drain()
	wg.Wait()
	require.Equal(t, 2, tg.pollOutcome("drained"))
}

// TestHeldPollsReleasedAtShutdown is acceptance 4, second half: thousands of
// held long-polls cost no thread each and are all answered when Serve
// shuts down; no goroutine is left behind.
func TestHeldPollsReleasedAtShutdown(t *testing.T) {
	const polls, users = 2000, 200
	tg := buildGateway(t, func(c *Config) { c.Reconnect.AdmitRate = 500 })
	tg.hc = &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: polls}}
	stop := tg.serve(t)
	t0 := time.Now()

	clients := make([]*user, users)
	for i := range clients {
		clients[i] = tg.user(t, int64(1000+i))
	}
	type answer struct {
		r   resp
		err error
	}
	answers := make([]answer, polls)
	var wg sync.WaitGroup
	for batch := 0; batch < polls; batch += 250 {
		for i := batch; i < batch+250; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i].r, answers[i].err = clients[i%users].doE("GET", "/v1/sync?wait=30", nil)
			}()
		}
		waitFor(t, 60*time.Second, "held polls", func() bool { return tg.g.HeldPolls() == batch+250 })
	}
	t.Logf("held after %v", time.Since(t0))
	threads := osThreads(t)
	t.Logf("%d held long-polls: %d OS threads, %d goroutines", polls, threads, runtime.NumGoroutine())
	require.Less(t, threads, 200, "a thread per held poll?")

	require.NoError(t, stop())
	wg.Wait()
	t.Logf("released after %v", time.Since(t0))
	// Each is told when to come back (docs/protocol.md, "Reconnect
	// hints"): 503, Retry-After and retry_after_ms, a slot of its own over
	// the window the polls take to be admitted at the admission rate.
	window := time.Duration(polls) * time.Second / time.Duration(tg.g.cfg.Reconnect.AdmitRate)
	var waits []int64
	for i, an := range answers {
		require.NoError(t, an.err, "poll %d", i)
		require.Equal(t, http.StatusServiceUnavailable, an.r.status, "poll %d: %s", i, an.r)
		require.True(t, an.r.close, "Connection: close")
		require.NotEmpty(t, an.r.header.Get("Retry-After"))
		var e protocol.ErrorBody
		an.r.decode(t, &e)
		require.Equal(t, protocol.CodeUnavailable, e.Error.Code)
		require.True(t, e.Error.Retryable)
		require.Positive(t, e.Error.RetryAfterMS)
		require.LessOrEqual(t, e.Error.RetryAfterMS, window.Milliseconds()+1)
		waits = append(waits, e.Error.RetryAfterMS)
	}
	slices.Sort(waits)
	require.Greater(t, waits[len(waits)-1]-waits[0], window.Milliseconds()/2, "spread over the window, not lumped")
	// One slot each (2 ms at 500/s): no two polls told the same moment
	// within a slot's width.
	require.Len(t, slices.Compact(slices.Clone(waits)), len(waits), "a slot of its own for every poll")
	require.Zero(t, tg.g.HeldPolls())
	require.Zero(t, tg.g.hub.Waiters())
	tg.hc.CloseIdleConnections()
	waitNoLeaks(t)
}

// waitNoLeaks waits until no goroutine of the gateway, an HTTP server
// connection or an HTTP client connection is left, and fails with their
// stacks after a generous timeout.
func waitNoLeaks(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := leftovers()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left behind:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func leftovers() []string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "gateway.Test") || strings.Contains(g, "gateway.Benchmark") {
			continue // the test itself
		}
		if strings.Contains(g, "inboxd/gateway.") || strings.Contains(g, "net/http.(*conn).serve") ||
			strings.Contains(g, "net/http.(*persistConn)") {
			out = append(out, g)
		}
	}
	return out
}

func osThreads(t testing.TB) int {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			require.NoError(t, err)
			return n
		}
	}
	t.Skip("no thread count")
	return 0
}

// TestListenerReconnect: when the LISTEN connection drops, a notification
// committed meanwhile is lost; after the reconnect every waiter is woken and
// re-reads, so the held long-poll still answers with the entry.
func TestListenerReconnect(t *testing.T) {
	tg, deafen, hear := deafGateway(t)
	a, b := tg.user(t, 1), tg.user(t, 2)
	cid := a.create(t, "pair", 2)
	_, head, _ := b.syncAll(t, 0, 50)

	done := make(chan resp, 1)
	go func() {
		r, _ := b.doE("GET", "/v1/sync?wait=30&after="+strconv.FormatInt(head, 10), nil)
		done <- r
	}()
	waitFor(t, 30*time.Second, "held poll", func() bool { return tg.g.HeldPolls() == 1 })

	deafen()

	// Sent while nobody listens: its notification is lost. The send
	// answers 202 (nobody wakes it) or 201 (on its last check).
	r := a.do(t, "POST", "/v1/conversations/"+strconv.FormatInt(cid, 10)+"/messages",
		`{"msg_id":"7d444840-9dc0-11d1-b245-5ffdce74fad2","body":"while deaf"}`)
	require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, r.status, "%s", r)
	tg.env.WaitCaughtUp(t, 30*time.Second)
	require.Equal(t, 1, tg.g.HeldPolls(), "the poll still waits")

	hear()
	got := <-done
	require.Equal(t, http.StatusOK, got.status, "%s", got)
	var s protocol.SyncAnswer
	got.decode(t, &s)
	require.Len(t, s.Entries, 1)
	require.Equal(t, "7d444840-9dc0-11d1-b245-5ffdce74fad2", s.Entries[0].Message.MsgID)
	require.Equal(t, 1, tg.pollOutcome("woken"))
	require.GreaterOrEqual(t, counterValue(tg.g.metrics.listenerReconnects), 1.0)
}
