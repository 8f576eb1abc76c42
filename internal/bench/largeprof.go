package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// largeProfiles takes, during phase idx of the large figure, a CPU profile
// of the gateway and samples PostgreSQL's active statements every 50ms;
// the returned func waits for the profile and prints where both went.
func largeProfiles(ctx context.Context, env *Env, pool *pgxpool.Pool, ctl string, idx int, seconds float64) func() {
	secs := max(1, int(seconds)-2)
	path := filepath.Join(env.OutDir, fmt.Sprintf("large-gateway-%d.pprof", idx))
	prof := profileGateway(ctx, ctl, secs, path)
	sctx, stop := context.WithTimeout(ctx, time.Duration(secs)*time.Second)
	done := make(chan map[string]int, 1)
	go func() {
		seen := map[string]int{}
		for sctx.Err() == nil {
			rows, err := pool.Query(sctx, `SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 120) FROM pg_stat_activity
				WHERE state = 'active' AND pid <> pg_backend_pid() AND backend_type = 'client backend'`)
			if err == nil {
				for rows.Next() {
					var q string
					if rows.Scan(&q) == nil {
						seen[q]++
					}
				}
				rows.Close()
			}
			sleepCtx(sctx, 50*time.Millisecond)
		}
		done <- seen
	}()
	return func() {
		stop()
		seen := <-done
		if err := <-prof; err != nil {
			progressf(env.Progress, "bench large: profile: %v", err)
		}
		qs := slices.SortedFunc(func(yield func(string) bool) {
			for q := range seen {
				if !yield(q) {
					return
				}
			}
		}, func(a, b string) int { return seen[b] - seen[a] })
		var sb strings.Builder
		for i, q := range qs {
			if i == 12 {
				break
			}
			fmt.Fprintf(&sb, "\n  %5d  %s", seen[q], q)
		}
		progressf(env.Progress, "bench large: phase %d: gateway CPU profile %s; active statements sampled every 50ms:%s", idx, path, sb.String())
	}
}
