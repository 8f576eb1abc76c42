package gateway

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests           *prometheus.CounterVec
	latency            *prometheus.HistogramVec
	heldPolls          prometheus.GaugeFunc
	notifications      prometheus.Counter
	listenerReconnects prometheus.Counter
	sends              *prometheus.CounterVec
	sendStages         *prometheus.HistogramVec
	sendCheckBatch     prometheus.Histogram
	changes            *prometheus.CounterVec
	polls              *prometheus.CounterVec
	cache              *prometheus.CounterVec
	headHit, headMiss  prometheus.Counter
	uploads            *prometheus.CounterVec
	revocationLoads    *prometheus.CounterVec
	rateShared         *prometheus.CounterVec
	swept              prometheus.Counter
	thumbnails         *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, held func() float64, connected func() float64) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "inboxd", Subsystem: "gateway", Name: "requests_total",
			Help: "HTTP requests by route pattern and status.",
		}, []string{"route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "inboxd", Subsystem: "gateway", Name: "request_duration_seconds",
			Help:    "HTTP request latency by route pattern and status (long-polls include the hold).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "status"}),
		heldPolls: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "inboxd", Subsystem: "gateway", Name: "held_long_polls",
			Help: "Long-polls currently held.",
		}, held),
		notifications: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "inboxd", Subsystem: "gateway", Name: "notifications_total",
			Help: "NOTIFY payloads received on the LISTEN connection.",
		}),
		listenerReconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "inboxd", Subsystem: "gateway", Name: "listener_reconnects_total",
			Help: "Times the LISTEN connection was lost or could not be opened.",
		}),
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "inboxd", Subsystem: "gateway", Name: "sends_total",
			Help: "Message sends by outcome (projected, duplicate, pending, rejected).",
		}, []string{"outcome"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "inboxd", Subsystem: "gateway", Name: "changes_total",
			Help: "Changes of messages (edits, deletes, reactions) by event type and outcome (projected, duplicate, pending, rejected).",
		}, []string{"type", "outcome"}),
		sendStages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "inboxd", Subsystem: "gateway", Name: "send_stage_seconds",
			Help: "Where a message send's time goes, by stage: check (the one statement before the append, its commit included), " +
				"append (sealing and the produce to Kafka, acknowledged), projection (from the append to the notification of its projection; " +
				"sends that ended pending are not observed).",
			Buckets: []float64{.00025, .0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"stage"}),
		sendCheckBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "inboxd", Subsystem: "gateway", Name: "send_check_batch_size",
			Help:    "Send checks committed together in one transaction (--send-check-batch above 1), per transaction.",
			Buckets: []float64{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64},
		}),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "inboxd", Subsystem: "gateway", Name: "long_polls_total",
			Help: "Held long-polls by how they ended (woken, timeout, drained, gone).",
		}, []string{"outcome"}),
	}
	m.cache = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "inboxd", Subsystem: "gateway", Name: "cache_lookups_total",
		Help: "Lookups of the in-memory caches by cache (messages: wire form of messages; heads: inbox heads answering 304s; tokens: verified bearer tokens) and result (hit, miss; held_back: on several PostgreSQL servers, pages ended before an entry whose message its conversation's server did not show yet, during a move).",
	}, []string{"cache", "result"})
	m.headHit, m.headMiss = m.cache.WithLabelValues("heads", "hit"), m.cache.WithLabelValues("heads", "miss")
	m.uploads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "inboxd", Subsystem: "gateway", Name: "uploads_total",
		Help: "Uploads of attachments asked for, by outcome (created; refused: invalid, over a limit or a quota, not a member; completed: a multipart upload joined, or a whole upload confirmed, on POST .../complete).",
	}, []string{"outcome"})
	m.revocationLoads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "inboxd", Subsystem: "gateway", Name: "revocation_loads_total",
		Help: "Reads of the revocations added (every --revocation-poll) by result (ok, error); while they fail, a token revoked since is still accepted here.",
	}, []string{"result"})
	m.revocationLoads.WithLabelValues("ok")
	m.revocationLoads.WithLabelValues("error")
	m.rateShared = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "inboxd", Subsystem: "gateway", Name: "rate_tokens_shared_total",
		Help: "Send-bucket tokens shared between gateways (--rate-share-interval) by outcome (told: spent here and told the others; heard: spent on others and taken here; unsent: a NOTIFY failed, the others did not hear them) and payloads dropped (unreadable).",
	}, []string{"outcome"})
	for _, o := range []string{"told", "heard", "unsent", "dropped"} {
		m.rateShared.WithLabelValues(o)
	}
	m.thumbnails = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "inboxd", Subsystem: "gateway", Name: "thumbnails_total",
		Help: "Thumbnails of attached images by outcome (made: stored and announced; failed: an image that cannot be read).",
	}, []string{"outcome"})
	m.swept = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "inboxd", Subsystem: "gateway", Name: "uploads_swept_total",
		Help: "Objects of attachments removed from the store: uploads never attached past their expiry, and the files of deleted messages.",
	})
	listening := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "inboxd", Subsystem: "gateway", Name: "listener_connected",
		Help: "1 while the LISTEN connection is up.",
	}, connected)
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.heldPolls, m.notifications,
		m.listenerReconnects, m.sends, m.sendStages, m.sendCheckBatch, m.changes, m.polls, m.cache, listening, m.uploads, m.swept, m.thumbnails, m.revocationLoads, m.rateShared} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// instrument counts and times h by its route pattern.
func (g *Gateway) instrument(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		status := strconv.Itoa(sw.status())
		g.metrics.requests.WithLabelValues(route, status).Inc()
		g.metrics.latency.WithLabelValues(route, status).Observe(time.Since(start).Seconds())
	})
}

// statusWriter remembers the status. It forwards Flush and Hijack (the
// WebSocket upgrade needs the latter) and unwraps for http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		if w.code == 0 {
			w.code = http.StatusSwitchingProtocols
		}
		return h.Hijack()
	}
	return nil, nil, errors.New("gateway: response writer cannot hijack")
}
