package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// largeProfiles takes, during phase idx of the large figure, a CPU profile
// of the gateway and samples PostgreSQL's active statements (with what
// each waits for, CPU when nothing) every 50ms;
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
			rows, err := pool.Query(sctx, `SELECT COALESCE(wait_event_type || ':' || wait_event, 'CPU') || '  ' || left(regexp_replace(query, '\s+', ' ', 'g'), 100) FROM pg_stat_activity
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

// waitPresence waits until the gateway at addr has published want users
// online (inboxd_gateway_presence_transitions_total{to="online"}): each
// connect writes the user's presence and tells the partners, so a phase
// started at once would measure the tail of the connect storm. It returns
// the count it saw last.
func waitPresence(ctx context.Context, addr string, want int, timeout time.Duration) (int, error) {
	end := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 10 * time.Second}
	n := 0
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			return n, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return n, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return n, err
		}
		for _, line := range strings.Split(string(body), "\n") {
			if rest, ok := strings.CutPrefix(line, `inboxd_gateway_presence_transitions_total{to="online"} `); ok {
				f, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				n = int(f)
			}
		}
		if n >= want || time.Now().After(end) {
			return n, nil
		}
		sleepCtx(ctx, 500*time.Millisecond)
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
	}
}
