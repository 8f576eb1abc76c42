package fanout

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/projector"
)

type metrics struct {
	records, skipped, inboxRows, messages, rejected, dead, retries prometheus.Counter
	batch                                                          prometheus.Histogram
	since                                                          *prometheus.HistogramVec
	pruned, pruneRuns                                              prometheus.Counter
	lag                                                            *prometheus.GaugeVec
	failures                                                       *prometheus.CounterVec
	convs                                                          *prometheus.CounterVec
}

func newMetrics() *metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "inboxd", Subsystem: "fanout", Name: name, Help: help})
	}
	pruned, runs := retentionMetrics()
	return &metrics{
		pruned: pruned, pruneRuns: runs,
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "inboxd", Subsystem: "fanout", Name: "lag_records",
			Help: "Records of an owned partition not applied yet: the log's end offset minus the stored next offset, refreshed every log check (default 5 s), so it keeps growing during a stall."}, []string{"partition"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "inboxd", Subsystem: "fanout", Name: "apply_failures_total",
			Help: "Failed attempts to apply a batch, by class: transient (retried), data (isolated, then dead-lettered), systemic (retried)."}, []string{"class"}),
		records:   c("records_total", "Records applied."),
		skipped:   c("records_skipped_total", "Records below the stored offsets (already applied), skipped."),
		inboxRows: c("inbox_rows_total", "Inbox rows written."),
		messages:  c("messages_total", "Message rows written, system messages included."),
		rejected:  c("rejected_total", "Events refused at their log position."),
		dead:      c("dead_letters_total", "Records sent to the DLQ."),
		retries:   c("batch_retries_total", "Retries of failed batches."),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "inboxd", Subsystem: "fanout",
			Name: "batch_seconds", Help: "Time to apply one batch, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		convs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "inboxd", Subsystem: "fanout", Name: "conversation_state_total",
			Help: "Conversations whose state a batch needed, by where it came from: read (from PostgreSQL), cached (the conversation cache, not read), " +
				"behind (cached, but the partition's offset had moved under the cache, so read again)."}, []string{"from"}),
		since: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "inboxd", Subsystem: "fanout",
			Name: "record_latency_seconds",
			Help: "Time from a record's log timestamp (its producer's clock) to the start of the transaction that applies it (stage queued) " +
				"and to that transaction's commit (stage committed), per record applied.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"stage"}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.records, m.skipped, m.inboxRows, m.messages, m.rejected, m.dead, m.retries, m.batch, m.since, m.pruned, m.pruneRuns, m.lag, m.failures, m.convs} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// observe counts an applied batch of recs, begun at start.
func (m *metrics) observe(r projector.Result, recs []projector.Record, start time.Time) {
	now := time.Now()
	queued, committed := m.since.WithLabelValues("queued"), m.since.WithLabelValues("committed")
	for _, rec := range recs {
		if !rec.Appended.IsZero() {
			queued.Observe(start.Sub(rec.Appended).Seconds())
			committed.Observe(now.Sub(rec.Appended).Seconds())
		}
	}
	d := now.Sub(start)
	m.records.Add(float64(r.Records))
	m.skipped.Add(float64(r.Skipped))
	m.inboxRows.Add(float64(r.InboxRows))
	m.messages.Add(float64(r.Messages))
	m.rejected.Add(float64(r.Rejected))
	m.convs.WithLabelValues("read").Add(float64(r.Conversations - r.Behind))
	m.convs.WithLabelValues("cached").Add(float64(r.Cached))
	m.convs.WithLabelValues("behind").Add(float64(r.Behind))
	m.batch.Observe(d.Seconds())
}

// forgetLag drops the lag of partitions this process no longer owns.
func (m *metrics) forgetLag(parts []int32) {
	for _, p := range parts {
		m.lag.DeleteLabelValues(strconv.Itoa(int(p)))
	}
}
