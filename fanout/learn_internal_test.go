package fanout

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// The log check's store of the topic id locks the offsets rows in
// partition order, as every apply transaction does. A transaction that
// holds partition 0 and then locks partition 2 goes on while the store
// waits, even when the rows lie in the table in the other order; before,
// the store locked them in the table's order, and PostgreSQL broke the
// deadlock after its deadlock_timeout (1 s: a stall of the partitions, and
// an error of the check, seen at the start of bench e2e runs).
func TestLearnTopicIDLocksInPartitionOrder(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := pool.Exec(ctx, `INSERT INTO consumer_offsets (topic, "partition", next_offset) VALUES ('t', 2, 0), ('t', 0, 0)`)
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	lock := `SELECT 1 FROM consumer_offsets WHERE topic = 't' AND "partition" = ANY($1::int[]) ORDER BY "partition" FOR UPDATE`
	_, err = tx.Exec(ctx, lock, []int32{0})
	require.NoError(t, err)

	stored := make(chan error, 1)
	go func() {
		_, err := pool.Exec(ctx, sqlLearnTopicID, "t", pgtype.UUID{Bytes: [16]byte{1}, Valid: true})
		stored <- err
	}()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%topic_id%'`).Scan(&n))
		return n > 0
	}, 10*time.Second, 10*time.Millisecond, "the store waits on partition 0")

	_, err = tx.Exec(ctx, lock, []int32{2})
	require.NoError(t, err, "the transaction locks partition 2")
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-stored)
	var learned int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM consumer_offsets WHERE topic_id IS NOT NULL`).Scan(&learned))
	require.Equal(t, 2, learned)
}
