package notifier

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of inboxd_notifier_notifications_total.
const (
	OutcomeQueued           = "queued"            // a new notification (burst) for a member
	OutcomeJoined           = "joined"            // a message joined a member's open burst
	OutcomeSent             = "sent"              // the receiver took it (2xx)
	OutcomeSkippedConnected = "skipped_connected" // the member was connected when it was due
	OutcomeSkippedDeleted   = "skipped_deleted"   // its only message was deleted meanwhile
	OutcomeRetried          = "retried"           // 429, 5xx or no answer: tried again later
	OutcomeDead             = "dead"              // refused (other 4xx) or out of attempts or age
	OutcomeDropped          = "dropped"           // not queued: MaxPending reached
)

type metrics struct {
	outcomes *prometheus.CounterVec
	webhook  prometheus.Histogram // one webhook call
	latency  prometheus.Histogram // commit of the first message -> the receiver took it
	pending  prometheus.Gauge
	lag      prometheus.Gauge // records the fanout projected that the notifier has not taken yet
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "inboxd", Subsystem: "notifier",
			Name: "notifications_total",
			Help: "Notifications by outcome: queued, joined (a message joined an open burst), sent, skipped_connected, skipped_deleted, retried, dead, dropped."},
			[]string{"outcome"}),
		webhook: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "inboxd", Subsystem: "notifier",
			Name: "webhook_seconds", Help: "Duration of one webhook call, whatever its answer.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "inboxd", Subsystem: "notifier",
			Name: "delivery_seconds", Help: "From the commit of a burst's first message to the receiver's 2xx (includes the delay).",
			Buckets: []float64{.5, 1, 2, 2.5, 3, 4, 5, 10, 30, 60, 300, 3600}}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "inboxd", Subsystem: "notifier",
			Name: "pending", Help: "Notifications waiting: due, not yet due, or being retried."}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "inboxd", Subsystem: "notifier",
			Name: "lag_records", Help: "Records the fanout has projected that the notifiers have not queued yet, over all partitions."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.outcomes, m.webhook, m.latency, m.pending, m.lag} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("notifier metrics: %w", err)
		}
	}
	return m, nil
}
