package placement_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/placement"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var empties int

// emptyDatabase is a database with nothing in it, not even the schema,
// as an operator would create for a new server.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin := pgtest.AdminURL(t)
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer conn.Close(ctx)
	empties++
	name := fmt.Sprintf("inboxd_empty_%d_%d", os.Getpid(), empties)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, admin)
		if err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(ctx)
		}
	})
	return pgtest.WithDB(admin, name)
}

// An existing single-server database is today's deployment as it stands:
// server 1 holding every partition, without a write.
func TestUpgradedDatabaseIsServerOneHoldingEverything(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewPool(t)
	m, err := placement.Load(ctx, pool)
	require.NoError(t, err)
	require.False(t, m.Sharded())
	require.Equal(t, int64(1), m.Version)
	require.Len(t, m.Servers, 1)
	require.Equal(t, placement.Server{ID: 1, Name: "server-1", AddedAt: m.Servers[0].AddedAt}, m.Servers[0])
	require.Len(t, m.Partitions(1, 12), 12)
}

func TestAddServer(t *testing.T) {
	ctx := context.Background()
	catalog, catalogURL := pgtest.NewPool(t)
	conn, err := catalog.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN "+placement.Channel)
	require.NoError(t, err)

	second := emptyDatabase(t)
	s, err := placement.AddServer(ctx, catalog, "", second)
	require.NoError(t, err)
	require.Equal(t, int32(2), s.ID)
	require.Equal(t, "server-2", s.Name)
	n, err := conn.Conn().WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, "2", n.Payload, "the new version announced")

	m, err := placement.Load(ctx, catalog)
	require.NoError(t, err)
	require.Equal(t, int64(2), m.Version)
	require.Len(t, m.Servers, 2)
	got, ok := m.ServerByID(2)
	require.True(t, ok)
	require.Equal(t, second, got.DSN)
	require.False(t, m.Sharded(), "a new server holds nothing until a move")
	require.Empty(t, m.Partitions(2, 12))

	// The new server has the schema, and knows which server it is.
	tp, err := pgxpool.New(ctx, second)
	require.NoError(t, err)
	defer tp.Close()
	var id int32
	require.NoError(t, tp.QueryRow(ctx, `SELECT server FROM shard_identity`).Scan(&id))
	require.Equal(t, int32(2), id)
	// One epoch for the deployment: a moved user's cursor stays valid.
	var epochs [2]int64
	require.NoError(t, catalog.QueryRow(ctx, `SELECT epoch FROM meta`).Scan(&epochs[0]))
	require.NoError(t, tp.QueryRow(ctx, `SELECT epoch FROM meta`).Scan(&epochs[1]))
	require.Equal(t, epochs[0], epochs[1], "the new server takes the catalog's epoch")

	// Refused: the same database again, the catalog itself, a database
	// holding projections, a bad name, no DSN; none of them changes the
	// catalog.
	_, err = placement.AddServer(ctx, catalog, "again", second)
	require.ErrorIs(t, err, placement.ErrNotEmpty)
	_, err = placement.AddServer(ctx, catalog, "self", catalogURL)
	require.ErrorIs(t, err, placement.ErrNotEmpty)
	full, fullURL := pgtest.NewPool(t)
	_, err = full.Exec(ctx, `INSERT INTO users (id) VALUES (7)`)
	require.NoError(t, err)
	_, err = placement.AddServer(ctx, catalog, "full", fullURL)
	require.ErrorIs(t, err, placement.ErrNotEmpty)
	_, err = placement.AddServer(ctx, catalog, "no spaces", emptyDatabase(t))
	require.ErrorContains(t, err, "server name")
	_, err = placement.AddServer(ctx, catalog, "x", "")
	require.Error(t, err)
	// A catalog URL that names another server is refused.
	_, err = placement.AddServer(ctx, tp, "", emptyDatabase(t))
	require.ErrorContains(t, err, "not the catalog")

	m2, err := placement.Load(ctx, catalog)
	require.NoError(t, err)
	require.Equal(t, m.Version, m2.Version)
	require.Len(t, m2.Servers, 2)

	third, err := placement.AddServer(ctx, catalog, "eu-3", emptyDatabase(t))
	require.NoError(t, err)
	require.Equal(t, placement.Server{ID: 3, Name: "eu-3", DSN: third.DSN, AddedAt: third.AddedAt}, third)
}
