package fanout_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/projector"
)

// With a short retention, old inbox entries go, floors move, I1 holds from
// the floor, and entries younger than the retention stay.
func TestRetentionMovesTheFloor(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 2})
	cfg := env.FanoutConfig()
	cfg.Retention = 1500 * time.Millisecond
	cfg.RetentionInterval = 300 * time.Millisecond
	f, err := fanout.New(cfg, env.Pool)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	g := workload.New(workload.Config{Seed: 5, Users: 50, Conversations: 10})
	appendEvents(t, env.Producer, generate(g, 2000), false)
	waitCaughtUp(t, env)
	var oldHeads int64
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT sum(inbox_seq) FROM users`).Scan(&oldHeads))

	// Wait for retention to take the first phase, then add a second phase
	// that is younger than the retention.
	require.Eventually(t, func() bool {
		var floors int64
		_ = env.Pool.QueryRow(ctx, `SELECT coalesce(sum(inbox_floor), 0) FROM users`).Scan(&floors)
		return floors == oldHeads
	}, time.Minute, 50*time.Millisecond, "every entry of the first phase is pruned and the floors moved to the old heads")
	appendEvents(t, env.Producer, generate(g, 500), false)
	waitCaughtUp(t, env)
	var young int64
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox`).Scan(&young))
	var heads, floors int64
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT sum(inbox_seq), sum(inbox_floor) FROM users`).Scan(&heads, &floors))
	require.Equal(t, heads-floors, young, "I1: what remains is floor+1..head")
	require.Positive(t, young)
	rep, err := projector.Verify(ctx, env.Pool)
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
	var msgs int64
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM messages`).Scan(&msgs))
	require.Positive(t, msgs, "messages are kept")
}
