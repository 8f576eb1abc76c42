package projector_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// TestBlocksProjected: user.blocked and user.unblocked, mixed with a
// conversation's events, project the same blocks rows whatever the cut of
// the log into batches: blocking twice keeps the first time, a block after
// an unblock takes its own, and nothing else of the projection moves.
func TestBlocksProjected(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var log []*events.Event
	block := func(typ string, blocker, blocked int64, d time.Duration) {
		e := events.New(typ, 0, blocker)
		e.UserID, e.At = blocked, t0.Add(d)
		log = append(log, e)
	}
	created := events.New(events.ConversationCreated, 1, 10)
	created.Members, created.At = []int64{11}, t0
	log = append(log, created)
	block(events.UserBlocked, 10, 11, time.Minute)     // 10 blocks 11 at :05
	block(events.UserBlocked, 10, 11, 2*time.Minute)   // again: nothing changes
	block(events.UserBlocked, 10, 12, time.Minute)     // 10 blocks 12 at :05
	block(events.UserUnblocked, 10, 12, 3*time.Minute) // ... and unblocks
	block(events.UserBlocked, 11, 10, time.Minute)     // 11 blocks 10 at :05
	block(events.UserUnblocked, 11, 10, 2*time.Minute) // ... unblocks
	block(events.UserBlocked, 11, 10, 4*time.Minute)   // ... and blocks again at :08
	block(events.UserUnblocked, 13, 10, time.Minute)   // unblocking who was never blocked
	log = append(log, sent(1, 11, "hi"))

	var dumps [][]string
	for _, n := range []int{1, 2, 3, len(log)} {
		pool, _ := pgtest.NewPool(t)
		applyLog(t, ctx, pool, log, n)
		requireVerified(t, pool)
		rows, err := pool.Query(ctx, `SELECT blocker_id || ' blocks ' || blocked_id || ' since ' ||
to_char(at AT TIME ZONE 'UTC', 'HH24:MI') FROM blocks ORDER BY 1`)
		require.NoError(t, err)
		var got []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			got = append(got, s)
		}
		require.NoError(t, rows.Err())
		var last, refused int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT last_seq, (SELECT count(*) FROM rejections) FROM conversations WHERE id = 1`).Scan(&last, &refused))
		require.Equal(t, int64(2), last, "cut %d: the conversation's events project as always", n)
		require.Zero(t, refused, "cut %d: no block is refused", n)
		dumps = append(dumps, got)
	}
	require.Equal(t, []string{"10 blocks 11 since 03:05", "11 blocks 10 since 03:08"}, dumps[0])
	for i := 1; i < len(dumps); i++ {
		require.Equal(t, dumps[0], dumps[i], "cut %d projects what one record at a time does", i)
	}
}
