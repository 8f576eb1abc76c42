package replay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/testenv"
)

// blocksOf is the blocks table read as text.
func blocksOf(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT blocker_id || '>' || blocked_id || ' ' || at FROM blocks ORDER BY blocker_id, blocked_id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// A replay rebuilds the blocks of user-level events, each on its
// blocker's server, as the live projection wrote them.
func TestReplayRebuildsBlocks(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 6})
	stop := env.StartFanout(t)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var evs []*events.Event
	for u := int64(1); u <= 30; u++ {
		c := events.New(events.ConversationCreated, u, u)
		c.Members, c.At = []int64{u%30 + 1}, t0
		evs = append(evs, c)
		for _, o := range []int64{u%30 + 1, u%7 + 31} {
			b := events.New(events.UserBlocked, 0, u)
			b.UserID, b.At = o, t0.Add(time.Duration(u)*time.Second)
			evs = append(evs, b)
		}
		if u%3 == 0 {
			ub := events.New(events.UserUnblocked, 0, u)
			ub.UserID, ub.At = u%30+1, t0.Add(time.Hour)
			evs = append(evs, ub)
		}
	}
	appendAll(t, env.Producer, evs, false)
	env.WaitCaughtUp(t, 2*time.Minute)
	before := blocksOf(t, env.Union(t))
	require.Len(t, before, 50, "30 users block two each; 10 unblock one")
	for u := int64(1); u <= 30; u++ {
		var n int
		require.NoError(t, env.UserPool(u).QueryRow(context.Background(), `SELECT count(*) FROM blocks WHERE blocker_id = $1`, u).Scan(&n))
		require.Equal(t, 2-btoi(u%3 == 0), n, fmt.Sprintf("user %d's blocks on its server", u))
	}
	stop()

	ctx := testenv.Ctx(t, 3*time.Minute)
	_, err := env.Replay(ctx, cfg(env))
	require.NoError(t, err)
	require.Equal(t, before, blocksOf(t, env.Union(t)))
	env.Verify(t)
}
