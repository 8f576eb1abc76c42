package gateway

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/gateway/internal/admit"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

// Defaults of ReconnectConfig.
const (
	DefaultAdmitRate    = admit.DefaultRate
	DefaultAdmitStartup = 30 * time.Second
)

// ReconnectConfig configures the reconnect hints and the admission of new
// sessions (docs/protocol.md, "Reconnect hints"; docs/operations.md,
// "Restarts and deploys"). Zero fields take their defaults.
type ReconnectConfig struct {
	// Disabled turns the hints and the admission off: a drain closes with a
	// bare 1012, drained long-polls answer 200 at once, every session is
	// admitted and the welcome has no reconnect hint (the behaviour before
	// hints; the storm benchmark's "SDK without hints"). Default off.
	Disabled bool

	// AdmitRate is the sessions per second this gateway admits while it
	// starts (a WebSocket hello, an HTTP catch-up sync: the catch-up read
	// is what a crowd costs), and the rate a drain spreads its sessions'
	// reconnects at. Above what the gateway and its database serve, a
	// crowd's reads slow down, time out and are retried; below, a crowd
	// waits longer than it must. Default DefaultAdmitRate (2,000).
	AdmitRate float64

	// AdmitBurst is how many sessions may be admitted at once above the
	// rate. Default AdmitRate/10.
	AdmitBurst int

	// AdmitStartup is how long after New the admission applies (and after
	// that, while clients it refused have not all come back). A running
	// gateway admits without limit: its caches are warm and its clients
	// arrive one by one. Default DefaultAdmitStartup (30s).
	AdmitStartup time.Duration

	// RestartDelay is when a drained session should come back, before the
	// spread: 0 behind a load balancer whose other gateways take the
	// sessions at once; the time a restart takes (stop, start, ready)
	// where one gateway serves alone, so that clients do not knock on a
	// closed port. It is also the after_ms of the welcome's hint for a
	// crash. Default 0.
	RestartDelay time.Duration
}

// reconnects implements ws.Admission for a gateway: admit.Controller
// during the start-up window, the spread of a drain, the welcome's hint,
// and their metrics.
type reconnects struct {
	ctrl    *admit.Controller
	until   time.Time // end of the start-up window
	decided *prometheus.CounterVec

	mu    sync.Mutex
	rnd   *rand.Rand
	slots int // the drain's slots handed out so far (Spread, drainedPoll)
}

func newReconnects(cfg ReconnectConfig, reg prometheus.Registerer) (*reconnects, error) {
	if cfg.Disabled {
		return nil, nil
	}
	if cfg.AdmitStartup == 0 {
		cfg.AdmitStartup = DefaultAdmitStartup
	}
	ctrl, err := admit.New(admit.Config{Rate: cfg.AdmitRate, Burst: cfg.AdmitBurst, RestartDelay: cfg.RestartDelay})
	if err != nil {
		return nil, err
	}
	r := &reconnects{ctrl: ctrl, until: time.Now().Add(cfg.AdmitStartup),
		rnd: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		decided: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "inboxd", Subsystem: "gateway", Name: "admissions_total",
			Help: "New sessions (WebSocket hellos, HTTP catch-up syncs) during the start-up admission by outcome: admitted (at the rate), claimed (on a slot given earlier), refused (503 or close 1013 with a slot to come back on).",
		}, []string{"outcome"}),
	}
	queue := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "inboxd", Subsystem: "gateway", Name: "admission_queue",
		Help: "Slots given to refused sessions and not yet claimed.",
	}, func() float64 { return float64(ctrl.Queue()) })
	for _, c := range []prometheus.Collector{r.decided, queue} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Admit implements ws.Admission: everyone after the start-up window, once
// the slots given out are claimed or expired.
func (r *reconnects) Admit() (bool, time.Duration) {
	if time.Now().After(r.until) && r.ctrl.Queue() == 0 {
		return true, 0
	}
	d := r.ctrl.Admit()
	switch {
	case d.Claimed:
		r.decided.WithLabelValues("claimed").Inc()
	case d.Admitted:
		r.decided.WithLabelValues("admitted").Inc()
	default:
		r.decided.WithLabelValues("refused").Inc()
	}
	return d.Admitted, d.RetryAfter
}

// Spread implements ws.Admission: the next n slots of the drain.
func (r *reconnects) Spread(n int) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.ctrl.SpreadFrom(r.slots, n, r.rnd)
	r.slots += n
	return d
}

// Hint implements ws.Admission.
func (r *reconnects) Hint(n int) *protocol.Reconnect {
	after, window := r.ctrl.Hint(n)
	return &protocol.Reconnect{AfterMS: after.Milliseconds(), WindowMS: window.Milliseconds()}
}

// admitSync applies the admission to an HTTP sync that opens a session:
// one without a wait (a long-polling client's first request, a polling
// client's request). Held long-polls are the sessions' later requests.
func (g *Gateway) admitSync(wait time.Duration) error {
	if g.reconnects == nil || wait > 0 {
		return nil
	}
	if ok, after := g.reconnects.Admit(); !ok {
		return apierr.ComeBack("gateway starting, come back after Retry-After (retry_after_ms)", after)
	}
	return nil
}

// drainedPoll is the answer of a long-poll held when the gateway drains:
// with hints, 503 and when to come back, the next slot of the drain (after
// those of the WebSockets closed before it); without, nil (the poll
// answers at once).
func (g *Gateway) drainedPoll() error {
	if g.reconnects == nil {
		return nil
	}
	after := g.reconnects.Spread(1)[0]
	return apierr.ComeBack("service restart, come back after Retry-After (retry_after_ms)", after)
}
