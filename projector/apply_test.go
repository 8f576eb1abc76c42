package projector_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/projector"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestFailedBatchRollsBack: a batch whose pipelined writes (and COMMIT)
// fail leaves nothing behind, the connection goes back usable, and the
// same batch applies once the obstacle is gone; I1-I8 hold.
func TestFailedBatchRollsBack(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewPool(t)
	pool.Config().MaxConns = 1
	p, err := projector.New(projector.Config{Topic: "t"}, pool)
	require.NoError(t, err)

	_, err = p.Apply(ctx, []projector.Record{{Partition: 0, Offset: 0, Event: created(1, 10, 10, 11)}})
	require.NoError(t, err)

	send := sent(1, 10, "hello")
	// An obstacle: a row where the message will go (seq 2 of conversation 1).
	_, err = pool.Exec(ctx, `ALTER TABLE inbox ADD CONSTRAINT no_seq_3 CHECK (inbox_seq <> 3)`)
	require.NoError(t, err)
	for range 3 {
		_, err = p.Apply(ctx, []projector.Record{{Partition: 0, Offset: 1, Event: send}})
		require.Error(t, err)
	}
	var n, next int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM messages`).Scan(&n))
	require.EqualValues(t, 1, n, "only the creation's system message")
	require.NoError(t, pool.QueryRow(ctx, `SELECT next_offset FROM consumer_offsets WHERE topic = 't' AND "partition" = 0`).Scan(&next))
	require.EqualValues(t, 1, next, "the offset did not move")

	_, err = pool.Exec(ctx, `ALTER TABLE inbox DROP CONSTRAINT no_seq_3`)
	require.NoError(t, err)
	res, err := p.Apply(ctx, []projector.Record{{Partition: 0, Offset: 1, Event: send}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Messages)
	// Applied again (a redelivery): skipped, and committed all the same.
	res, err = p.Apply(ctx, []projector.Record{{Partition: 0, Offset: 1, Event: send}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Skipped)
	requireVerified(t, pool)
	var idle int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&idle))
	require.Zero(t, idle, "no connection left in a transaction")
}
