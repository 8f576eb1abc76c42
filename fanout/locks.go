package fanout

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/projection"
)

// holdFanoutLock holds projection.LockFanout shared on a dedicated connection
// until ctx ends, so that `inboxd replay` (which takes it exclusively)
// refuses to run beside a live fanout. While a replay holds it, fanout waits
// here before consuming. ready is closed once the lock is first held. A
// dropped connection is replaced and the lock taken again.
func (f *Fanout) holdFanoutLock(ctx context.Context, pool *pgxpool.Pool, ready chan<- struct{}) {
	first := true
	for ctx.Err() == nil {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		for ctx.Err() == nil {
			var got bool
			if err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock_shared($1)`, projection.LockFanout).Scan(&got); err != nil || got {
				break
			}
			f.cfg.Logger.Warn("a replay holds the projections; waiting for it to finish")
			sleepCtx(ctx, 2*time.Second)
		}
		if err == nil && ctx.Err() == nil {
			if first {
				close(ready)
				first = false
			}
			// Hold it; check the connection now and then.
			for ctx.Err() == nil {
				sleepCtx(ctx, 5*time.Second)
				if ctx.Err() != nil {
					break
				}
				if _, err = conn.Exec(ctx, `SELECT 1`); err != nil {
					break
				}
			}
		}
		// Unlock explicitly: a closed connection's locks are only released
		// when its backend notices, which a replay started right after this
		// fanout stopped could still see as held.
		uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock_all()`); err != nil {
			_ = conn.Conn().Close(uctx) // the lock goes with the session
		}
		cancel()
		conn.Release()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
