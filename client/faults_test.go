package client_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
)

// scenario is one way of breaking the path between the clients and the
// gateway while they receive and send.
type scenario struct {
	name      string
	transport client.Transport
	// httpSends: users 2 and 4 send over HTTP even with a WebSocket up.
	httpSends bool
	// setup builds the path and returns the clients' URL, the faults to
	// turn on for the workload, the healing, a fault counter (for the log)
	// and an optional periodic disruption.
	setup func(t *testing.T, w *world) (url string, on, heal func(), report func() string, every func())
	// check runs on the apps after convergence.
	check func(t *testing.T, apps map[int64]*app)
}

func httpFaults(t *testing.T, w *world, f faults) (string, func(), func(), func() string, func()) {
	p := newFaultProxy(t, w.url, 42)
	return p.url, func() { p.set(f) }, func() { p.set(faults{}) }, p.String, p.killAll
}

func sawTransport(apps map[int64]*app, transport string) bool {
	for _, a := range apps {
		a.mu.Lock()
		for _, s := range a.statuses {
			if s.State == client.StateConnected && s.Transport == transport {
				a.mu.Unlock()
				return true
			}
		}
		a.mu.Unlock()
	}
	return false
}

var scenarios = []scenario{
	{
		name: "tcp cuts mid-stream and dropped connections",
		setup: func(t *testing.T, w *world) (string, func(), func(), func() string, func()) {
			p := newTCPProxy(t, w.url, 7)
			return p.url, func() { p.set(0.6, 3<<10, time.Millisecond) }, func() { p.set(0, 0, 0) },
				func() string { return fmt.Sprintf("cuts=%d", p.cuts.Load()) }, p.killAll
		},
	},
	{
		name: "lost requests and answers, 429/503, websocket frame loss, duplicates and close codes",
		setup: func(t *testing.T, w *world) (string, func(), func(), func() string, func()) {
			return httpFaults(t, w, faults{StatusP: 0.1, DropReqP: 0.05, DropRespP: 0.15, CutRespP: 0.05,
				Delay: 20 * time.Millisecond, WSDropP: 0.25, WSDupP: 0.2, WSCloseP: 0.05, WSKillP: 0.03,
				WSLoseAckP: 0.15, WSDelayMax: 10 * time.Millisecond})
		},
		httpSends: true,
	},
	{
		name: "overload: everything 429/503 with Retry-After",
		setup: func(t *testing.T, w *world) (string, func(), func(), func() string, func()) {
			url, on, heal, rep, _ := httpFaults(t, w, faults{StatusP: 1, RefuseWS: http.StatusServiceUnavailable})
			return url, on, heal, rep, nil
		},
	},
	{
		name: "no websocket: long-polling fallback under faults",
		setup: func(t *testing.T, w *world) (string, func(), func(), func() string, func()) {
			p := newFaultProxy(t, w.url, 43)
			f := faults{RefuseWS: http.StatusNotFound, StatusP: 0.05, DropRespP: 0.1, CutRespP: 0.05}
			// The WebSocket stays refused after the healing.
			return p.url, func() { p.set(f) }, func() { p.set(faults{RefuseWS: http.StatusNotFound}) }, p.String, p.killAll
		},
		check: func(t *testing.T, apps map[int64]*app) {
			require.True(t, sawTransport(apps, "polling"), "no client fell back to long-polling")
			require.False(t, sawTransport(apps, "websocket"), "a WebSocket came up through a proxy refusing them")
		},
	},
	{
		name:      "polling transport under faults",
		transport: client.TransportPolling,
		setup: func(t *testing.T, w *world) (string, func(), func(), func() string, func()) {
			return httpFaults(t, w, faults{StatusP: 0.1, DropReqP: 0.05, DropRespP: 0.1, CutRespP: 0.1, Delay: 10 * time.Millisecond})
		},
	},
}

// TestFaults is acceptance 1: with faults between the clients and the
// gateway while they receive and send, every client ends with every entry
// exactly once, in order, and every queued send with exactly one message.
// Run never stops on these (temporary) failures.
func TestFaults(t *testing.T) {
	const (
		perClient = 12                      // sends per faulty client
		direct    = 40                      // sends of a fault-free user
		faultFor  = 2500 * time.Millisecond // at least
	)
	users := []int64{1, 2, 3, 4}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			noClientGoroutines(t)
			w := newWorld(t, nil, nil)
			ctx := context.Background()
			carol := w.direct(t, 5)
			all, err := carol.CreateConversation(ctx, "all", 1, 2, 3, 4)
			require.NoError(t, err)
			c12, err := carol.CreateConversation(ctx, "one-two", 1, 2)
			require.NoError(t, err)
			c34, err := carol.CreateConversation(ctx, "three-four", 3, 4)
			require.NoError(t, err)
			convsOf := map[int64][]int64{1: {all, c12}, 2: {all, c12}, 3: {all, c34}, 4: {all, c34}}
			rc := start(t, carol, newApp())

			url, on, heal, report, every := sc.setup(t, w)
			on()
			apps := map[int64]*app{}
			runs := map[int64]*running{}
			for _, u := range users {
				a := newApp()
				cfg := w.config(t, url, u, a)
				cfg.Transport = sc.transport
				cfg.SendOverHTTP = sc.httpSends && u%2 == 0
				c, err := client.New(cfg)
				require.NoError(t, err)
				apps[u], runs[u] = a, start(t, c, a)
			}

			// The workload: each client sends into its conversations while
			// carol sends to all of them; a disruption now and then.
			stopDisrupt := make(chan struct{})
			var dwg sync.WaitGroup
			if every != nil {
				dwg.Add(1)
				go func() {
					defer dwg.Done()
					for {
						select {
						case <-stopDisrupt:
							return
						case <-time.After(time.Duration(200+rand.IntN(300)) * time.Millisecond):
							every()
						}
					}
				}()
			}
			faultUntil := time.Now().Add(faultFor)
			sent := map[int64][]string{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for _, u := range users {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < perClient; i++ {
						cid := convsOf[u][i%2]
						id, err := runs[u].c.Send(ctx, cid, fmt.Sprintf("user %d message %d", u, i))
						if err != nil {
							t.Errorf("send: %v", err)
							return
						}
						mu.Lock()
						sent[u] = append(sent[u], id)
						mu.Unlock()
						time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
					}
				}()
			}
			for i := 0; i < direct; i++ {
				_, err := carol.Send(ctx, []int64{all, c12, c34}[i%3], fmt.Sprintf("carol %d", i))
				require.NoError(t, err)
				time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
			}
			wg.Wait()
			// Faults go on a little after the last send.
			time.Sleep(max(500*time.Millisecond, time.Until(faultUntil)))
			close(stopDisrupt)
			dwg.Wait()
			heal()
			t.Logf("faults injected: %s", report())

			waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			for _, id := range carol.Outbox() {
				_, err := carol.WaitSent(waitCtx, id.MsgID)
				require.NoError(t, err)
			}
			for _, u := range users {
				waitSends(t, runs[u], sent[u])
			}
			for _, u := range users {
				converge(t, w, u, runs[u], nil)
			}
			for _, u := range users {
				requireExactlyOnce(t, w, u, apps[u].snapshot())
				requireSent(t, w, apps[u], sent[u])
				_, ended := runs[u].ended()
				require.False(t, ended, "Run of user %d stopped on temporary faults", u)
			}
			if sc.check != nil {
				sc.check(t, apps)
			}
			for _, u := range users {
				require.NoError(t, runs[u].stop())
			}
			require.NoError(t, rc.stop())
		})
	}
}
