package write

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Checks in flight on one runner go together: each caller gets the row
// of its own statement (here its own insert, committed), batches of more
// than one check form under concurrency, and a check that fails inside a
// batch fails alone: the batch runs again one by one, and the others
// still get their rows, once.
func TestCheckBatcher(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := pool.Exec(ctx, `CREATE TABLE batched (id int PRIMARY KEY, v text NOT NULL)`)
	require.NoError(t, err)
	var mu sync.Mutex
	sizes := map[int]int{}
	b := newCheckBatcher(pool, 1, 16, func(n int) { mu.Lock(); sizes[n]++; mu.Unlock() })
	// Each check inserts its row (a write, as the send check's body key)
	// and returns it with a value computed from its argument; 1/$3 fails
	// for the checks given 0.
	const sql = `WITH k AS (INSERT INTO batched (id, v) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING RETURNING v)
SELECT (SELECT v FROM k), 1 / $3::int`
	const n = 400
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range n {
		wg.Go(func() {
			div := 1
			if i%50 == 7 {
				div = 0
			}
			var v string
			var q int
			err := b.queryRow(ctx, sql, []any{i, fmt.Sprint("v", i), div}, []any{&v, &q})
			if div == 0 {
				if err == nil {
					t.Errorf("check %d: no error from a division by zero", i)
				}
				failed.Add(1)
				return
			}
			if err != nil {
				t.Errorf("check %d: %v", i, err)
				return
			}
			if v != fmt.Sprint("v", i) || q != 1 {
				t.Errorf("check %d got %q, %d", i, v, q)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, n/50, failed.Load())
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM batched`).Scan(&rows))
	require.Equal(t, n-n/50, rows, "every check that answered committed its row, once; the failed ones none")
	batched := 0
	for size, count := range sizes {
		if size > 1 {
			batched += count
		}
	}
	require.Positive(t, batched, "checks in flight went together: %v", sizes)
	t.Logf("batch sizes (size: batches): %v", sizes)

	// A check whose context ended before its turn is not run.
	done, stop := context.WithCancel(ctx)
	stop()
	var v string
	var q int
	require.ErrorIs(t, b.queryRow(done, sql, []any{n + 1, "late", 1}, []any{&v, &q}), context.Canceled)
}
