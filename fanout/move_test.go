package fanout_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/shardtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/placement"
)

// followPlacement runs every server's stages under the catalog's
// placement and, as inboxd fanout does by exiting, starts them again
// whenever its version changes; s.servers.Map follows it.
func (s *shardedEnv) followPlacement(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var stop func()
	start := func(m *placement.Map) {
		mu.Lock()
		defer mu.Unlock()
		var stops []func()
		for i := range s.servers.Pools {
			stops = append(stops, s.startStages(t, i, m))
		}
		stop = func() {
			for _, f := range stops {
				f()
			}
		}
		s.current.Store(m)
	}
	m, err := placement.Load(ctx, s.Pool)
	require.NoError(t, err)
	start(m)
	wg.Add(1)
	go func() {
		defer wg.Done()
		version := m.Version
		for ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			now, err := placement.Load(ctx, s.Pool)
			if err != nil || now.Version == version {
				continue
			}
			version = now.Version
			mu.Lock()
			stop()
			mu.Unlock()
			start(now)
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		mu.Lock()
		stop()
		mu.Unlock()
	})
}

// A partition moves from server 2 to server 1 while sends flow, through
// an interrupted move that is aborted and one interrupted after its copy
// that is resumed: afterwards the deployment is what the model says, each
// server is clean by itself, and every delivery emitted is applied once.
func TestMovePartitionUnderLoad(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 4})
	second, secondURL := pgtest.NewPool(t)
	ctx := testenv.Ctx(t, 5*time.Minute)
	_, err := placement.AddServer(ctx, env.Pool, "two", secondURL)
	require.NoError(t, err)
	require.NoError(t, placement.Assign(ctx, env.Pool, 2, []int32{1, 3}))
	s := &shardedEnv{Env: env, deliveries: env.Topic + ".deliveries",
		servers: shardtest.Servers{Pools: []*pgxpool.Pool{env.Pool, second}, Partitions: 4, Topic: env.Topic}}
	s.createDeliveries(t)
	s.followPlacement(t)

	g := workload.New(workload.Config{Seed: 51, Users: 300, Conversations: 60,
		EditPct: 3, DeletePct: 2, ReactPct: 6, UnreactPct: 2, ReplyPct: 10})
	evs := generate(g, 12000)
	appendEvents(t, s.Producer, evs[:3000], true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 3000; i < len(evs); i += 300 {
			appendEvents(t, s.Producer, evs[i:i+300], true)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	cfg := placement.MoveConfig{Partition: 1, Target: 1, Partitions: 4, Topic: env.Topic, Deliveries: s.deliveries, Logger: env.Logger}
	// A move that stops once the partition is paused, then is aborted.
	stopAt := func(phase string) func(string) bool { return func(p string) bool { return p == phase } }
	cfg.Stop = stopAt(placement.PhaseStarted)
	time.Sleep(500 * time.Millisecond)
	_, err = placement.Move(ctx, env.Pool, cfg)
	require.True(t, errors.Is(err, placement.ErrStopped), "%v", err)
	require.NoError(t, placement.Abort(ctx, env.Pool, cfg))
	// One that stops after its copy, which cannot be aborted and resumes.
	time.Sleep(500 * time.Millisecond)
	cfg.Stop = stopAt(placement.PhaseCopied)
	_, err = placement.Move(ctx, env.Pool, cfg)
	require.True(t, errors.Is(err, placement.ErrStopped), "%v", err)
	require.Error(t, placement.Abort(ctx, env.Pool, cfg))
	cfg.Stop = nil
	res, err := placement.Move(ctx, env.Pool, cfg)
	require.NoError(t, err)
	t.Logf("partition 1 moved to server 1 (resumed after its copy): paused %v this run", res.Paused)
	// And a whole move without a stop, of another partition.
	res, err = placement.Move(ctx, env.Pool, placement.MoveConfig{Partition: 3, Target: 1, Partitions: 4, Topic: env.Topic,
		Deliveries: s.deliveries, Logger: env.Logger})
	require.NoError(t, err)
	t.Logf("partition 3 moved to server 1: %d conversations, %d users, %d rows, copied in %v, paused %v",
		res.Conversations, res.Users, res.Rows, res.Copy, res.Paused)
	require.Positive(t, res.Rows)
	<-done
	m, err := placement.Load(ctx, env.Pool)
	require.NoError(t, err)
	require.Equal(t, []int32{0, 1, 2, 3}, m.Partitions(1, 4))
	testenv.WaitFor(t, time.Minute, "the stages follow the last placement", func() bool { return s.currentMap().Version == m.Version })
	s.servers.Map = m
	s.waitCaughtUp(t)
	s.verifyCrossing(t)
	assertOutcome(t, &testenv.Env{Pool: s.servers.Union(t), Producer: env.Producer, Topic: env.Topic}, g)
	var left int64
	require.NoError(t, second.QueryRow(ctx, `SELECT (SELECT count(*) FROM conversations) + (SELECT count(*) FROM users) + (SELECT count(*) FROM records)`).Scan(&left))
	require.Zero(t, left, "server 2 holds nothing once its partitions moved")
}
