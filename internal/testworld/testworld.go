// Package testworld serves a gateway for the tests of the packages that
// talk to one over the network (the SDK, the notifier): its HTTP API and
// its WebSocket on a loopback listener, with its LISTEN connection up,
// until the test ends. (The gateway's own tests cannot use it: it imports
// the gateway.)
package testworld

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Gateway is a served gateway.
type Gateway struct {
	G   *gateway.Gateway
	WS  *gateway.WebSocket
	URL string // http://127.0.0.1:port
	// Stop shuts the gateway down as `inboxd gateway` does on SIGTERM
	// (drain: sessions closed with 1012, held long-polls answered; then
	// the HTTP server's graceful shutdown) and waits for it. The test's
	// end calls it too; it is idempotent.
	Stop func()
}

// Serve builds a gateway of cfg (its Registerer is replaced) on env's
// database and producer, with a WebSocket of wcfg mounted at /v1/ws, and
// serves it until the test ends (then the sessions close with 1012 and
// everything is waited for). It returns once the LISTEN connection is up.
func Serve(t testing.TB, env *testenv.Env, cfg gateway.Config, wcfg gateway.WSConfig) *Gateway {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	g, err := gateway.NewOn(cfg, Placement(env), env.Producer)
	require.NoError(t, err)
	ws, err := g.NewWebSocket(wcfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("GET /v1/ws", ws)
	mux.Handle("/", g.Handler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); _ = g.Listen(ctx) }()
	go func() { defer wg.Done(); _ = ws.Run(ctx) }()
	go func() { defer wg.Done(); _ = srv.Serve(ln) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			g.Drain()
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer scancel()
			if srv.Shutdown(sctx) != nil {
				_ = srv.Close()
			}
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(30 * time.Second)
	for !listening(reg) {
		if time.Now().After(deadline) {
			t.Fatal("the gateway's LISTEN connection did not come up in 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &Gateway{G: g, WS: ws, URL: "http://" + ln.Addr().String(), Stop: stop}
}

// listening reads the gateway's listener_connected gauge.
func listening(reg *prometheus.Registry) bool {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "inboxd_gateway_listener_connected" {
			return mf.GetMetric()[0].GetGauge().GetValue() == 1
		}
	}
	return false
}

// Placement is env's placement as the gateway reads it: one server, or
// the servers of INBOXD_TEST_PG_SERVERS.
func Placement(env *testenv.Env) gateway.Placement {
	return gateway.Placement{Pools: env.Pools, Map: env.Map, Partitions: env.Partitions}
}
