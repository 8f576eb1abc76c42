package importer

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/shardtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// An import into a deployment on two servers: its conversations land on
// both, the wait reads each server's offsets and the check counts each
// server's messages; the history is what one server would hold (read on
// the union of the servers, with the catalog's import ids), the
// invariants hold on each server, across and on the union, and the same
// file appended again changes nothing.
func TestImportOnTwoServers(t *testing.T) {
	h := history{convs: 200, msgsPerConv: 20, members: 4}
	path := writeHistory(t, h)
	env := testenv.New(t, testenv.Options{Partitions: 4, Servers: 2})
	env.StartFanout(t)
	ctx := context.Background()
	cfg := Config{File: path, Source: "oldchat", Wait: true, Logger: env.Logger, Servers: env.Pools}
	res, err := Run(ctx, cfg, env.Pool, env.Producer)
	require.NoError(t, err)
	require.Equal(t, int64(h.convs*h.msgsPerConv), res.Messages)
	env.WaitCaughtUp(t, 2*time.Minute)
	env.Verify(t)
	union := func() *pgxpool.Pool {
		u := shardtest.Servers{Pools: env.Pools, Map: env.Map, Partitions: env.Partitions, Topic: env.Topic}.Union(t)
		shardtest.CopyRows(t, ctx, env.Pool, u, "import_conversations", func(map[string]any) bool { return true })
		return u
	}
	first := union()
	checkImported(t, &testenv.Env{Pool: first, Producer: env.Producer, Topic: env.Topic}, h)
	before := takeSnapshot(t, first)
	var onSecond int64
	require.NoError(t, env.Pools[1].QueryRow(ctx, `SELECT count(*) FROM conversations`).Scan(&onSecond))
	require.Positive(t, onSecond, "conversations on the second server")

	cfg.Restart = true
	again, err := Run(ctx, cfg, env.Pool, env.Producer)
	require.NoError(t, err)
	require.Equal(t, res.Appended, again.Appended)
	env.WaitCaughtUp(t, 2*time.Minute)
	require.Equal(t, before, takeSnapshot(t, union()))
	env.Verify(t)
}
