package fanout

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/projector"
)

// runRetention prunes inbox entries older than cfg.Retention every
// cfg.RetentionInterval until ctx ends.
func (f *Fanout) runRetention(ctx context.Context, pool *pgxpool.Pool) {
	if f.cfg.RetentionInterval < 0 {
		return
	}
	t := time.NewTicker(f.cfg.RetentionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		res, err := projector.Prune(ctx, pool, start.Add(-f.cfg.Retention), 1000)
		if err != nil {
			if ctx.Err() == nil {
				f.cfg.Logger.Warn("retention run failed", "err", err)
			}
			continue
		}
		f.m.pruned.Add(float64(res.Deleted))
		f.m.pruneRuns.Inc()
		f.cfg.Logger.Info("retention run", "deleted", res.Deleted, "users", res.Users,
			"retention", f.cfg.Retention, "took", time.Since(start))
	}
}

func retentionMetrics() (pruned, runs prometheus.Counter) {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "inboxd", Subsystem: "retention", Name: "deleted_total",
			Help: "Inbox rows deleted by retention."}),
		prometheus.NewCounter(prometheus.CounterOpts{Namespace: "inboxd", Subsystem: "retention", Name: "runs_total",
			Help: "Retention runs."})
}
