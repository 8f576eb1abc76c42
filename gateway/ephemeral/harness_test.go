package ephemeral

import (
	"context"
	"encoding/json"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/gateway/internal/ratelimit"
	"github.com/inboxd/inboxd/protocol"
)

// quiet is the logger of the Services of these tests: what they log is
// what the tests check, or the noise of a fault they inject.
var quiet = slog.New(slog.DiscardHandler)

// wait bounds every wait of these tests for something that must happen;
// nothing here is timed.
const wait = 10 * time.Second

// gateway is one gateway process's Service on a world.
type gateway struct {
	t   *testing.T
	s   *Service
	id  string
	end func() // ends Run (idempotent)
}

type gatewayOpts struct {
	cfg    Config
	limits *ratelimit.Limiters // default unlimited
	noRun  bool
}

// startGateway makes a Service over a pool of w and, unless noRun, runs
// it until the test ends; it hears w's notifications.
func startGateway(t *testing.T, w *world, o gatewayOpts) *gateway {
	t.Helper()
	noServiceGoroutinesAtEnd(t)
	pool := newPool(t, w)
	if o.limits == nil {
		o.limits = ratelimit.New(rate.Inf, 1)
	}
	if o.cfg.GatewayID == "" {
		o.cfg.GatewayID = uuid.NewString()
	}
	if o.cfg.Logger == nil {
		o.cfg.Logger = quiet
	}
	s, err := New(o.cfg, pool, o.limits)
	require.NoError(t, err)
	g := &gateway{t: t, s: s, id: o.cfg.GatewayID, end: func() {}}
	w.listen(g.id, s)
	if !o.noRun {
		g.run(w)
	}
	return g
}

// run runs the Service until the test ends (or end), and waits for its
// first heartbeat to be done: it writes the rows of every local user again
// (its row was new), which would run beside what a test looks at.
func (g *gateway) run(w *world) {
	beats := len(w.callsOf("dead_gateways"))
	defer w.waitFor(g.t, "the first heartbeat", func() bool { return len(w.callsOfLocked("dead_gateways")) > beats })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.s.Run(ctx) }()
	var once sync.Once
	g.end = func() {
		once.Do(func() {
			cancel()
			require.NoError(g.t, <-done)
		})
	}
	g.t.Cleanup(g.end)
}

var goroutineChecks sync.Map

// noServiceGoroutinesAtEnd checks, after the test and its cleanups, that
// no goroutine of a Service is left.
func noServiceGoroutinesAtEnd(t *testing.T) {
	t.Helper()
	if _, done := goroutineChecks.LoadOrStore(t, true); done {
		return
	}
	t.Cleanup(func() {
		goroutineChecks.Delete(t)
		var left string
		deadline := time.Now().Add(wait)
		for {
			buf := make([]byte, 1<<20)
			left = ""
			for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
				if strings.Contains(g, "ephemeral.(*Service).") {
					left += g + "\n\n"
				}
			}
			if left == "" || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if left != "" {
			t.Errorf("goroutines left:\n%s", left)
		}
	})
}

// local is a local WebSocket session: what it was delivered, and whether
// it takes frames (a session before its welcome, or lagging, does not).
type local struct {
	user   int64
	frames chan frame
	refuse atomic.Bool
	leave  func()
}

// frame is a delivered frame, decoded.
type frame struct {
	kind string
	protocol.ServerFrame
	raw string
}

// join registers a session of user on g.
func (g *gateway) join(user int64) *local {
	l := &local{user: user, frames: make(chan frame, 64)}
	l.leave = g.s.Join(user, func(kind string, b []byte) bool {
		if l.refuse.Load() {
			return false
		}
		f := frame{kind: kind, raw: string(b)}
		if err := json.Unmarshal(b, &f.ServerFrame); err != nil {
			panic(err)
		}
		l.frames <- f
		return true
	})
	return l
}

// next is the next frame delivered to l.
func (l *local) next(t *testing.T) frame {
	t.Helper()
	select {
	case f := <-l.frames:
		return f
	case <-time.After(wait):
		t.Fatalf("no frame for user %d", l.user)
		return frame{}
	}
}

// nextOf is the next frame of kind delivered to l (presence frames of
// the sessions' comings and goings come in between).
func (l *local) nextOf(t *testing.T, kind string) frame {
	t.Helper()
	for {
		if f := l.next(t); f.kind == kind {
			return f
		}
	}
}

// counter is the value of a counter.
func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}
