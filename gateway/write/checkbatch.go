package write

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// checkBatcher runs the send checks of one server that are in flight
// together: the checks queued while every runner is busy go in one
// transaction, one round trip and one commit (one WAL flush), instead of
// a commit each (a check writes its msg_id's body key, so each is a
// durable write). A check that finds a runner free runs alone, at once,
// as without the batcher: it only changes anything under load.
//
// The requests' goroutines do the work: the first to find a free runner
// slot runs the queue (its own check with what is waiting), and a runner
// that leaves work queued behind it passes it on, so no check waits for
// one that already returned.
type checkBatcher struct {
	pool    *pgxpool.Pool
	runners int // checks (or batches of them) in flight at most
	max     int // checks in one batch at most

	mu      sync.Mutex
	queue   []*checkReq
	running int
	// observe, when not nil, is told each batch's size.
	observe func(n int)
}

// checkReq is one check: its statement, arguments and scan targets.
type checkReq struct {
	ctx  context.Context
	sql  string
	args []any
	dest []any
	err  error
	done chan struct{}
}

func newCheckBatcher(pool *pgxpool.Pool, runners, max int, observe func(int)) *checkBatcher {
	return &checkBatcher{pool: pool, runners: max1(runners), max: max1(max), observe: observe}
}

func max1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

// queryRow runs sql with args and scans its one row into dest, batched
// with the other checks in flight.
func (b *checkBatcher) queryRow(ctx context.Context, sql string, args []any, dest []any) error {
	r := &checkReq{ctx: ctx, sql: sql, args: args, dest: dest, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, r)
	lead := b.running < b.runners
	if lead {
		b.running++
	}
	b.mu.Unlock()
	if lead {
		b.run()
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		// The check may still run (and make a body key no send uses,
		// which is harmless); its answer is not waited for.
		return ctx.Err()
	}
}

// run takes the queue (up to max checks), runs it, and hands what was
// queued meanwhile to a new runner.
func (b *checkBatcher) run() {
	b.mu.Lock()
	n := min(len(b.queue), b.max)
	batch := b.queue[:n:n]
	b.queue = b.queue[n:]
	b.mu.Unlock()
	b.runBatch(batch)
	b.mu.Lock()
	b.running--
	more := len(b.queue) > 0 && b.running < b.runners
	if more {
		b.running++
	}
	b.mu.Unlock()
	if more {
		go b.run()
	}
}

// runBatch runs the live checks of batch: one alone, several in one
// transaction; a transaction that fails runs its checks again one by one,
// so that each gets its own answer.
func (b *checkBatcher) runBatch(batch []*checkReq) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			close(r.done)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	if b.observe != nil {
		b.observe(len(live))
	}
	if len(live) == 1 || b.together(live) != nil {
		for _, r := range live {
			r.err = b.pool.QueryRow(r.ctx, r.sql, r.args...).Scan(r.dest...)
			close(r.done)
		}
		return
	}
	for _, r := range live {
		close(r.done)
	}
}

// together runs the checks in one transaction; on an error nothing of it
// is committed and no check has its answer.
func (b *checkBatcher) together(live []*checkReq) error {
	// The checks' own contexts bound their waits; the batch, shared by
	// them, is bounded by a timeout of its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(live[0].ctx), 30*time.Second)
	defer cancel()
	bt := &pgx.Batch{}
	bt.Queue("BEGIN")
	for _, r := range live {
		bt.Queue(r.sql, r.args...).QueryRow(func(row pgx.Row) error { return row.Scan(r.dest...) })
	}
	bt.Queue("COMMIT")
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release() // a connection left in a failed transaction is closed by the pool
	return conn.SendBatch(ctx, bt).Close()
}
