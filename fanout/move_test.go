package fanout_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/placement"
)

// moveConfig is a move of partition p to server target in env, settled
// by fanout.ApplyWaiting.
func moveConfig(env *testenv.Env, p, target int32) placement.MoveConfig {
	return placement.MoveConfig{Partition: p, Target: target, Partitions: env.Partitions, Topic: env.Topic,
		Deliveries: env.Deliveries, Logger: env.Logger, DrainTimeout: time.Minute,
		Settle: func(ctx context.Context, pool *pgxpool.Pool, version int64) (int, error) {
			return fanout.ApplyWaiting(ctx, env.Brokers, env.Deliveries, p, pool, version, env.Logger)
		}}
}

// Two servers and a third added empty; while events flow, a third of the
// partitions (one from each server) move to the third, through a move
// interrupted once it paused and aborted, and one interrupted after its
// copy and resumed. The stages follow each placement as inboxd fanout
// does. Afterwards the deployment is what the model says, each server is
// clean by itself and across (a conversation's entries in order in every
// inbox: what a move without its settle steps broke), and the servers
// the partitions left hold nothing of them.
func TestMovePartitionsUnderLoad(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 6, Servers: 2})
	ctx := testenv.Ctx(t, 5*time.Minute)
	third, thirdURL := pgtest.NewPool(t)
	s3, err := placement.AddServer(ctx, env.Pool, "server-3", thirdURL)
	require.NoError(t, err)
	env.Pools = append(env.Pools, third)
	env.FollowPlacement(t)

	g := workload.New(workload.Config{Seed: 51, Users: 300, Conversations: 60,
		EditPct: 3, DeletePct: 2, ReactPct: 6, UnreactPct: 2, ReplyPct: 10})
	// INBOXD_MOVE_EVENTS makes the log longer, for the figures of a move
	// of more state (docs/scaling.md); the suite runs 12,000.
	n := 12000
	if v, err := strconv.Atoi(os.Getenv("INBOXD_MOVE_EVENTS")); err == nil && v > n {
		n = v / 300 * 300
	}
	evs := generate(g, n)
	// Every user blocks the next: user-level state of the users'
	// partitions, which a move must carry with them.
	blocks := make([]*events.Event, 0, 300)
	for u := int64(1); u <= 300; u++ {
		b := events.New(events.UserBlocked, 0, u)
		b.UserID = u%300 + 1
		blocks = append(blocks, b)
	}
	appendEvents(t, env.Producer, blocks, true)
	// A quarter of the log is projected before the moves start (the
	// state they move); the rest flows during them.
	first := max(3000, n/4/300*300)
	for i := 0; i < first; i += 3000 {
		appendEvents(t, env.Producer, evs[i:min(i+3000, first)], true)
	}
	if first > 3000 {
		testenv.WaitFor(t, 5*time.Minute, "the first quarter projected", func() bool {
			return env.Settle(time.Second)
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := first; i < len(evs); i += 300 {
			appendEvents(t, env.Producer, evs[i:i+300], true)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	stopAt := func(phase string) func(string) bool { return func(p string) bool { return p == phase } }

	// Partition 2 (server 1): a move that stops once the partition is
	// paused and is aborted, then one that stops after its copy, cannot
	// be aborted, and resumes.
	time.Sleep(500 * time.Millisecond)
	cfg := moveConfig(env, 2, s3.ID)
	cfg.Stop = stopAt(placement.PhaseStarted)
	_, err = placement.Move(ctx, env.Pool, cfg)
	require.True(t, errors.Is(err, placement.ErrStopped), "%v", err)
	require.NoError(t, placement.Abort(ctx, env.Pool, cfg))
	time.Sleep(500 * time.Millisecond)
	cfg.Stop = stopAt(placement.PhaseCopied)
	_, err = placement.Move(ctx, env.Pool, cfg)
	require.True(t, errors.Is(err, placement.ErrStopped), "%v", err)
	require.Error(t, placement.Abort(ctx, env.Pool, cfg))
	cfg.Stop = nil
	res, err := placement.Move(ctx, env.Pool, cfg)
	require.NoError(t, err)
	t.Logf("partition 2: server %d -> %d (resumed after its copy): paused %v this run, target fenced %v, %d deliveries settled",
		res.From, res.To, res.Paused, res.Fenced, res.Settled)
	// Partition 3 (server 2), whole.
	time.Sleep(500 * time.Millisecond)
	res, err = placement.Move(ctx, env.Pool, moveConfig(env, 3, s3.ID))
	require.NoError(t, err)
	t.Logf("partition 3: server %d -> %d: %d conversations, %d users, %d rows, copied in %v, paused %v, target fenced %v, %d deliveries settled",
		res.From, res.To, res.Conversations, res.Users, res.Rows, res.Copy, res.Paused, res.Fenced, res.Settled)
	require.Positive(t, res.Rows)
	<-done

	m, err := placement.Load(ctx, env.Pool)
	require.NoError(t, err)
	require.Equal(t, []int32{2, 3}, m.Partitions(s3.ID, env.Partitions))
	testenv.WaitFor(t, time.Minute, "the stages follow the last placement", func() bool { return env.CurrentMap().Version == m.Version })
	env.Map = m
	env.WaitCaughtUp(t, 3*time.Minute)
	assertOutcome(t, env, g) // each server's, the crossing's and the union's
	moved := func(p int32) bool { return p == 2 || p == 3 }
	var convs, users []int64
	for c := range g.LastSeq {
		if moved(placement.OfConversation(c, env.Partitions)) {
			convs = append(convs, c)
		}
	}
	for u := int64(1); u <= 300; u++ {
		if moved(placement.OfUser(u, env.Partitions)) {
			users = append(users, u)
		}
	}
	require.NotEmpty(t, convs)
	for i, pool := range env.Pools[:2] {
		var left int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM conversations WHERE id = ANY($1::bigint[]))
			+ (SELECT count(*) FROM users WHERE id = ANY($2::bigint[]))`, convs, users).Scan(&left))
		require.Zero(t, left, "server %d keeps nothing of the moved partitions", i+1)
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM blocks WHERE blocker_id = ANY($1::bigint[])`, users).Scan(&left))
		require.Zero(t, left, "server %d keeps no block of the moved partitions' users", i+1)
	}
	var blocked int
	require.NoError(t, third.QueryRow(ctx, `SELECT count(*) FROM blocks WHERE blocker_id = ANY($1::bigint[])`, users).Scan(&blocked))
	require.Equal(t, len(users), blocked, "the moved users' blocks are on their new server")
}
