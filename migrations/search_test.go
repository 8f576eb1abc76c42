package migrations_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/migrations"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// TestSetSearchConfig: switching the configuration recomputes every
// message's index (english stems "running" to "run"), leaves deleted and
// system messages unindexed, is a no-op the second time, and refuses a
// configuration the database does not have.
func TestSetSearchConfig(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewPool(t)
	_, err := pool.Exec(ctx, `INSERT INTO messages (conversation_id, seq, msg_id, sender_id, kind, body, created_at, deleted)
VALUES (1, 1, gen_random_uuid(), 1, 'text', 'the dogs were running', now(), false),
       (1, 2, gen_random_uuid(), 1, 'system', '{"event":"running"}', now(), false),
       (1, 3, gen_random_uuid(), 1, 'text', '', now(), true)`)
	require.NoError(t, err)
	count := func(q string) (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE search_vector @@ plainto_tsquery(inboxd_search.config(), $1)`, q).Scan(&n))
		return n
	}
	require.Equal(t, 1, count("running"))
	require.Equal(t, 0, count("run"), "simple does not stem")

	n, err := migrations.SetSearchConfig(ctx, pool, "english")
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the one text message not deleted is reindexed")
	var raw string
	require.NoError(t, pool.QueryRow(ctx, `SELECT search_vector::text FROM messages WHERE seq = 1`).Scan(&raw))
	require.Equal(t, "'dog':2 'run':4", raw)
	require.Equal(t, 1, count("run"))
	require.Equal(t, 1, count("runs"), "the query is stemmed the same way")

	n, err = migrations.SetSearchConfig(ctx, pool, "english")
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = migrations.SetSearchConfig(ctx, pool, "klingon")
	require.ErrorContains(t, err, `no text search configuration "klingon"`)
	var nulls int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE search_vector IS NULL`).Scan(&nulls))
	require.Equal(t, 2, nulls, "system and deleted messages stay unindexed")
}
