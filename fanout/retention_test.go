package fanout_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/workload"
)

// With a short retention, old inbox entries go, floors move, I1 holds from
// the floor, and entries younger than the retention stay (on several
// servers, each server's retention prunes its users' inboxes).
func TestRetentionMovesTheFloor(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 2})
	env.StartFanoutWith(t, func(cfg *fanout.Config) {
		cfg.Retention = 1500 * time.Millisecond
		cfg.RetentionInterval = 300 * time.Millisecond
	})
	ctx := context.Background()

	g := workload.New(workload.Config{Seed: 5, Users: 50, Conversations: 10})
	appendEvents(t, env.Producer, generate(g, 2000), false)
	waitCaughtUp(t, env)
	oldHeads, _ := heads(t, env)

	// Wait for retention to take the first phase, then add a second phase
	// that is younger than the retention.
	require.Eventually(t, func() bool {
		_, floors := heads(t, env)
		return floors == oldHeads
	}, time.Minute, 50*time.Millisecond, "every entry of the first phase is pruned and the floors moved to the old heads")
	appendEvents(t, env.Producer, generate(g, 500), false)
	waitCaughtUp(t, env)
	var young int64
	for _, pool := range env.Pools {
		var n int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox`).Scan(&n))
		young += n
	}
	head, floor := heads(t, env)
	require.Equal(t, head-floor, young, "I1: what remains is floor+1..head")
	require.Positive(t, young)
	env.Verify(t)
	var msgs int64
	require.NoError(t, env.Union(t).QueryRow(ctx, `SELECT count(*) FROM messages`).Scan(&msgs))
	require.Positive(t, msgs, "messages are kept")
}

// heads sums the users' inbox heads and floors, each user's read on its
// server.
func heads(t testing.TB, env *testenv.Env) (head, floor int64) {
	t.Helper()
	for _, pool := range env.Pools {
		rows, err := pool.Query(context.Background(), `SELECT id, inbox_seq, inbox_floor FROM users`)
		require.NoError(t, err)
		for rows.Next() {
			var id, h, f int64
			require.NoError(t, rows.Scan(&id, &h, &f))
			if env.UserPool(id) == pool {
				head, floor = head+h, floor+f
			}
		}
		require.NoError(t, rows.Err())
	}
	return head, floor
}
