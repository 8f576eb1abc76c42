package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/shardtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/replay"
)

// A replay of a deployment on two servers rebuilds both from the log: the
// conversations, messages, spans, records and rejections of the servers
// taken together are the live ones, every inbox holds the same entries
// (in an order of its own: a user's local and delivered entries
// interleave by timing), each server has a new epoch, the invariants hold
// on each server, across them and on their union, and the stages go on
// from where the replay ended.
func TestShardedReplayRebuildsTheSameProjections(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 6, Servers: 2})
	stop := env.StartFanout(t)
	g := workload.New(workload.Config{Seed: 17, Users: 400, Conversations: 80,
		EditPct: 3, DeletePct: 2, ReactPct: 6, UnreactPct: 2, ReplyPct: 10})
	evs := make([]*events.Event, 8000)
	for i := range evs {
		evs[i] = g.Next()
	}
	for i := 0; i < len(evs); i += 2000 {
		appendAll(t, env.Producer, evs[i:i+2000], true)
	}
	env.WaitCaughtUp(t, 3*time.Minute)
	servers := shardtest.Servers{Pools: env.Pools, Map: env.Map, Partitions: env.Partitions, Topic: env.Topic}
	before := takeOf(t, servers.Union(t))
	epochs := func() (out []int64) {
		for _, pool := range env.Pools {
			var e int64
			require.NoError(t, pool.QueryRow(context.Background(), `SELECT epoch FROM meta`).Scan(&e))
			out = append(out, e)
		}
		return out
	}
	old := epochs()
	ctx := testenv.Ctx(t, 5*time.Minute)
	rs := replay.Servers{Pools: env.Pools, Map: env.Map, Partitions: env.Partitions, Deliveries: env.Deliveries}
	_, err := replay.RunSharded(ctx, cfg(env), rs)
	require.ErrorIs(t, err, replay.ErrFanoutRunning, "replay refuses beside a live stage")
	stop()

	res, err := replay.RunSharded(ctx, cfg(env), rs)
	require.NoError(t, err)
	require.Positive(t, res.Records)
	now := epochs()
	for i, e := range now {
		require.Greater(t, e, old[i], "server %d's epoch", i+1)
		require.Equal(t, now[0], e, "one epoch for the deployment")
	}
	require.Equal(t, old[0], old[1], "the servers of a deployment start at the catalog's epoch")
	after := takeOf(t, servers.Union(t))
	require.Equal(t, before.conversations, after.conversations)
	require.Equal(t, before.messages, after.messages)
	require.Equal(t, before.spans, after.spans)
	require.Equal(t, before.records, after.records)
	require.Equal(t, before.rejections, after.rejections)
	require.Equal(t, before.inboxes, after.inboxes)
	var outbox int64
	for _, pool := range env.Pools {
		var n int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n))
		outbox += n
	}
	require.Zero(t, outbox, "every delivery of the rebuild applied")
	env.Verify(t)

	// The stages go on where the replay ended: the new records are
	// projected once, across servers too.
	env.StartFanout(t)
	more := make([]*events.Event, 1500)
	for i := range more {
		more[i] = g.Next()
	}
	appendAll(t, env.Producer, more, false)
	env.WaitCaughtUp(t, 3*time.Minute)
	got := map[int64]int64{}
	for _, pool := range env.Pools {
		rows, err := pool.Query(ctx, `SELECT id, last_seq FROM conversations`)
		require.NoError(t, err)
		for rows.Next() {
			var id, s int64
			require.NoError(t, rows.Scan(&id, &s))
			got[id] = s
		}
		rows.Close()
	}
	require.Equal(t, g.LastSeq, got)
	env.Verify(t)
}
