package ws

import (
	"errors"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the WebSocket metrics, registered by New.
type metrics struct {
	conns        prometheus.Gauge
	closes       *prometheus.CounterVec // by close code
	frames       *prometheus.CounterVec // frames written by type
	entries      prometheus.Counter     // entries written in entries frames
	pushLatency  prometheus.Histogram
	lagging      prometheus.Gauge
	stalled      prometheus.GaugeFunc
	slowCloses   *prometheus.CounterVec // by reason
	batchSize    prometheus.Histogram
	batchLatency prometheus.Histogram
	batchErrors  prometheus.Counter
	announced    prometheus.Counter     // pushes built from announced entries, without a read
	received     *prometheus.CounterVec // client frames by type
}

func newMetrics(reg prometheus.Registerer, stalled func() float64) (*metrics, error) {
	const ns, sub = "inboxd", "gateway_ws"
	m := &metrics{
		conns: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "connections",
			Help: "WebSocket connections open (upgraded and accepted)."}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "closes_total",
			Help: "Close frames sent by the server, by close code (4001, 4003, 4008, 4029, 1008, 1011, 1012, 1013)."}, []string{"code"}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "frames_written_total",
			Help: "Frames written, by type (welcome, entries, too_long, heartbeat, send_ack, error, pong)."}, []string{"type"}),
		entries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "pushed_entries_total",
			Help: "Inbox entries written in entries frames (catch-up and live)."}),
		pushLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "push_latency_seconds",
			Help:    "From a session noticing the hub's wake-up (a NOTIFY received, plus the hub's wake jitter) to the entries frame written to the socket.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}}),
		lagging: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "lagging_sessions",
			Help: "Sessions with entries waiting in PostgreSQL that their full outbound queue could not take."}),
		stalled: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "stalled_writes",
			Help: "Sessions whose current write has been blocked for more than a second (the client is not reading)."}, stalled),
		slowCloses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "slow_closes_total",
			Help: "Connections closed for slowness: lag (4008 after SlowTimeout), control (4008, replies not read), write_timeout (no close frame possible)."}, []string{"reason"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "push_batch_sessions",
			Help:    "Sessions read by one push query.",
			Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}}),
		batchLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "push_query_seconds",
			Help:    "Duration of one push query.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}}),
		batchErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "push_query_errors_total",
			Help: "Push queries that failed (their sessions are retried)."}),
		announced: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "announced_pushes_total",
			Help: "Pushes built from the entries a notification announced (messages from the cache), without a push query."}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "frames_received_total",
			Help: "Client frames by type (hello, send, ping, invalid)."}, []string{"type"}),
	}
	// A second endpoint on the same registry (tests mount extra ones)
	// shares the first one's collectors.
	var err error
	reuse := func(c prometheus.Collector) prometheus.Collector {
		if err != nil {
			return c
		}
		e := reg.Register(c)
		var are prometheus.AlreadyRegisteredError
		switch {
		case e == nil:
			return c
		case errors.As(e, &are):
			return are.ExistingCollector
		default:
			err = e
			return c
		}
	}
	m.conns = reuse(m.conns).(prometheus.Gauge)
	m.closes = reuse(m.closes).(*prometheus.CounterVec)
	m.frames = reuse(m.frames).(*prometheus.CounterVec)
	m.entries = reuse(m.entries).(prometheus.Counter)
	m.pushLatency = reuse(m.pushLatency).(prometheus.Histogram)
	m.lagging = reuse(m.lagging).(prometheus.Gauge)
	m.stalled = reuse(m.stalled).(prometheus.GaugeFunc)
	m.slowCloses = reuse(m.slowCloses).(*prometheus.CounterVec)
	m.batchSize = reuse(m.batchSize).(prometheus.Histogram)
	m.batchLatency = reuse(m.batchLatency).(prometheus.Histogram)
	m.batchErrors = reuse(m.batchErrors).(prometheus.Counter)
	m.announced = reuse(m.announced).(prometheus.Counter)
	m.received = reuse(m.received).(*prometheus.CounterVec)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) closed(code int) { m.closes.WithLabelValues(strconv.Itoa(code)).Inc() }
