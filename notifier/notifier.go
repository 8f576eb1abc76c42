package notifier

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// Notifier is one notifier process's work: the consumer that queues
// notifications (consume.go, queue.go) and the workers that deliver them
// (deliver.go). Several processes with the same Group share the
// partitions; every one delivers any due notification (rows are claimed
// with SKIP LOCKED).
type Notifier struct {
	cfg  Config
	pool *pgxpool.Pool
	m    *metrics

	pendingNow atomic.Int64 // the pending notifications at the last count
	ready      atomic.Bool  // the consumer joined the group
}

// New makes a Notifier over pool.
func New(cfg Config, pool *pgxpool.Pool) (*Notifier, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Notifier{cfg: cfg, pool: pool, m: m}, nil
}

// Run consumes and delivers until ctx ends. A notification being
// delivered when ctx ends is left claimed: its claim expires and it is
// tried again (with the same id) by whichever notifier comes next.
func (n *Notifier) Run(ctx context.Context) error {
	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return n.consume(ctx) })
	eg.Go(func() error { return n.dispatch(ctx) })
	eg.Go(func() error { return n.janitor(ctx) })
	return eg.Wait()
}

// Ready says whether the consumer has been assigned partitions and stored
// where they start (for /readyz).
func (n *Notifier) Ready() bool { return n.ready.Load() }

// Ping checks PostgreSQL.
func (n *Notifier) Ping(ctx context.Context) error { return n.pool.Ping(ctx) }

const (
	sqlCountPending = `SELECT (SELECT count(*) FROM notifications WHERE state = 'pending'),
	COALESCE((SELECT sum(greatest(c.next_offset - o.next_offset, 0)) FROM consumer_offsets c
		JOIN notifier_offsets o ON o.topic = c.topic AND o."partition" = c."partition" WHERE c.topic = $1), 0)::bigint`
	sqlForget = `DELETE FROM notifications WHERE state <> 'pending' AND done_at < now() - $1 * interval '1 millisecond'`
)

// janitor refreshes the pending count (MaxPending, the gauge) and the lag
// behind the fanout (over all partitions), and forgets
// finished notifications older than Keep.
func (n *Notifier) janitor(ctx context.Context) error {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for i := 0; ; i++ {
		var pending, lag int64
		if err := n.pool.QueryRow(ctx, sqlCountPending, n.cfg.Topic).Scan(&pending, &lag); err == nil {
			n.pendingNow.Store(pending)
			n.m.pending.Set(float64(pending))
			n.m.lag.Set(float64(lag))
		} else if ctx.Err() == nil {
			n.cfg.Logger.Warn("counting pending notifications", "err", err)
		}
		if i%30 == 0 {
			if _, err := n.pool.Exec(ctx, sqlForget, n.cfg.Keep.Milliseconds()); err != nil && ctx.Err() == nil {
				n.cfg.Logger.Warn("forgetting old notifications", "err", fmt.Errorf("delete: %w", err))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
