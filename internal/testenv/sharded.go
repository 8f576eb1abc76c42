package testenv

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/shardtest"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/projector"
	"github.com/inboxd/inboxd/replay"
)

// EnvServers names the variable that runs the tests that build their world
// with New on that many PostgreSQL servers (databases) instead of one.
const EnvServers = "INBOXD_TEST_PG_SERVERS"

// servers is the number of servers o asks for.
func (o Options) servers(t testing.TB) int {
	if o.Servers > 0 {
		return o.Servers
	}
	v := os.Getenv(EnvServers)
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 16 {
		t.Fatalf("%s=%q: a number of servers from 1 to 16", EnvServers, v)
	}
	return n
}

// Sharded says whether the world has several servers.
func (e *Env) Sharded() bool { return len(e.Pools) > 1 }

// shard makes the world a deployment on n servers: n-1 more databases,
// each added to the catalog as a server, and partition p placed on server
// p%n + 1, before anything is projected (the way an operator lays out a
// new sharded deployment with inboxd shards).
func (e *Env) shard(t testing.TB, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 1; i < n; i++ {
		pool, url := pgtest.NewPool(t)
		s, err := placement.AddServer(ctx, e.Pool, fmt.Sprintf("server-%d", i+1), url)
		if err != nil {
			t.Fatal(err)
		}
		var parts []int32
		for p := range e.Partitions {
			if int(p)%n == i {
				parts = append(parts, p)
			}
		}
		if len(parts) > 0 {
			if err := placement.Assign(ctx, e.Pool, s.ID, parts); err != nil {
				t.Fatal(err)
			}
		}
		warm(ctx, t, pool, 4)
		e.Pools = append(e.Pools, pool)
	}
	m, err := placement.Load(ctx, e.Pool)
	if err != nil {
		t.Fatal(err)
	}
	e.Map = m
	e.Deliveries = e.Topic + ".deliveries"
	if err := producer.EnsureDeliveriesTopic(ctx, e.Producer.Client(), e.ProducerConfig(), e.Deliveries, e.Partitions, 7*24*time.Hour); err != nil {
		t.Fatal(err)
	}
}

// warm opens n connections of pool, as the first server's has from its
// migrations and fanout, so that the first statements a test times do
// not each wait for a connection to be made.
func warm(ctx context.Context, t testing.TB, pool *pgxpool.Pool, n int) {
	t.Helper()
	var conns []*pgxpool.Conn
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// ServerOf is the index in Pools of the server of partition p.
func (e *Env) ServerOf(p int32) int { return int(e.Map.Server(p)) - 1 }

// UserPool is the database of user's state (inbox, records, settings of
// the projection); ConvPool of conv's (messages, member spans).
func (e *Env) UserPool(user int64) *pgxpool.Pool {
	return e.Pools[e.ServerOf(placement.OfUser(user, e.Partitions))]
}

// ConvPool: see UserPool.
func (e *Env) ConvPool(conv int64) *pgxpool.Pool {
	return e.Pools[e.ServerOf(placement.OfConversation(conv, e.Partitions))]
}

// FollowPlacement runs every server's stages under the catalog's
// placement and, as inboxd fanout does by exiting, starts them again on
// each new version (a server added to the catalog needs its pool in Pools
// first, in the catalog's order). CurrentMap is the version they run
// under. It replaces StartFanout in tests that move partitions.
func (e *Env) FollowPlacement(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m, err := placement.Load(ctx, e.Pool)
	if err != nil {
		t.Fatal(err)
	}
	e.current.Store(m)
	stop := e.startStagesOn(t, m, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			now, err := placement.Load(ctx, e.Pool)
			if err != nil || now.Version == e.current.Load().Version {
				continue
			}
			stop()
			e.current.Store(now)
			stop = e.startStagesOn(t, now, nil)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		stop()
	})
}

// CurrentMap is the placement FollowPlacement's stages run under.
func (e *Env) CurrentMap() *placement.Map { return e.current.Load() }

// startStagesOn runs every server's stages under placement m until stop:
// its conversation stage (a fanout of its partitions, its configuration
// edited by edit when not nil) and its deliverer (relay and user stage).
func (e *Env) startStagesOn(t testing.TB, m *placement.Map, edit func(*fanout.Config)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(m.Servers))
	for i, srv := range m.Servers {
		pool := e.Pools[i]
		cfg, dcfg := e.StageConfigs(m, srv.ID)
		if edit != nil {
			edit(&cfg)
		}
		f, err := fanout.New(cfg, pool)
		if err != nil {
			t.Fatal(err)
		}
		e.started(f)
		d, err := fanout.NewDeliverer(dcfg, pool)
		if err != nil {
			t.Fatal(err)
		}
		for _, run := range []func(context.Context) error{f.Run, d.Run} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- run(ctx)
			}()
		}
	}
	var stopped atomic.Bool
	return func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("stages: %v", err)
			}
		}
	}
}

// StageConfigs are the configurations of server's conversation stage (a
// fanout of its partitions of the event topic) and of its deliverer (its
// relay and user stage) under placement m; Run them on the server's pool.
func (e *Env) StageConfigs(m *placement.Map, server int32) (fanout.Config, fanout.DelivererConfig) {
	owns := func(p int32) bool { return m.Serves(p, server) }
	cfg := e.FanoutConfig()
	cfg.Group = fmt.Sprintf("%s.%d", cfg.Group, server)
	cfg.Owns = owns
	cfg.Users = placement.Users{Map: m, Server: server, Partitions: e.Partitions}
	cfg.PlacementVersion = m.Version
	return cfg, fanout.DelivererConfig{Brokers: e.Brokers, Topic: e.Deliveries,
		Group: fmt.Sprintf("deliveries-%s.%d", e.Topic, server), Owns: owns, PlacementVersion: m.Version,
		RelayInterval: 100 * time.Millisecond, Logger: e.Logger}
}

// FanoutGroups are the consumer groups that apply the event topic: the
// fanout's, or on several servers each conversation stage's.
func (e *Env) FanoutGroups() []string {
	if !e.Sharded() {
		return []string{e.FanoutConfig().Group}
	}
	var gs []string
	for _, srv := range e.Map.Servers {
		cfg, _ := e.StageConfigs(e.Map, srv.ID)
		gs = append(gs, cfg.Group)
	}
	return gs
}

// FanoutProcs are the environments of the `inboxd fanout` processes that
// project the world, base added to each: one process, or on several
// servers one per server (INBOXD_SHARD_SERVER; an INBOXD_INSTANCE_ID of
// base gets the server's number appended, one static member per group).
func (e *Env) FanoutProcs(base []string) [][]string {
	if !e.Sharded() {
		return [][]string{base}
	}
	var out [][]string
	for _, srv := range e.Map.Servers {
		var env []string
		for _, kv := range base {
			if strings.HasPrefix(kv, "INBOXD_INSTANCE_ID=") {
				kv = fmt.Sprintf("%s-%d", kv, srv.ID)
			}
			env = append(env, kv)
		}
		out = append(out, append(env, fmt.Sprintf("INBOXD_SHARD_SERVER=%d", srv.ID)))
	}
	return out
}

// StoredOffsets is the sum of the next offsets stored for the event
// topic's partitions, each read on its server (an error reads as 0).
func (e *Env) StoredOffsets(ctx context.Context) int64 {
	var sum int64
	for i, pool := range e.Pools {
		rows, err := pool.Query(ctx, `SELECT "partition", next_offset FROM consumer_offsets WHERE topic = $1`, e.Topic)
		if err != nil {
			continue
		}
		for rows.Next() {
			var p int32
			var next int64
			if rows.Scan(&p, &next) == nil && e.ServerOf(p) == i {
				sum += next
			}
		}
		rows.Close()
	}
	return sum
}

// Union is the deployment read as one database: on one server its own;
// on several a fresh copy made of each conversation's state from its
// server and each user's from theirs (shardtest.Servers.Union), so that a
// check written for one server reads the whole. Call it caught up.
func (e *Env) Union(t testing.TB) *pgxpool.Pool {
	t.Helper()
	if !e.Sharded() {
		return e.Pool
	}
	return shardtest.Servers{Pools: e.Pools, Map: e.Map, Partitions: e.Partitions, Topic: e.Topic}.Union(t)
}

// Settle waits up to timeout until every server's stages are caught up
// (WaitCaughtUp's condition), and reports whether they were: on several
// servers a write is answered once its conversation's server (or, for a
// send, the sender's) has it, and a member on another server has it a
// Kafka hop later. Tests that read another user's inbox right after a
// write settle first, so they assert what one server would show; the
// hop itself is what the push and long-poll tests wait through.
func (e *Env) Settle(timeout time.Duration) bool {
	if !e.Sharded() {
		return true
	}
	return e.waitStages(context.Background(), timeout) == nil
}

// waitStages waits until each server applied its partitions of the event
// topic, every outbox is empty and each user stage applied its
// partitions of the deliveries topic.
func (e *Env) waitStages(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := e.Producer.Flush(ctx); err != nil {
		return err
	}
	adm := kadm.NewClient(e.Producer.Client())
	caughtUp := func(topic string) (bool, error) {
		ends, err := endOffsets(ctx, adm, topic)
		if err != nil {
			return false, err
		}
		for p, end := range ends {
			var next int64
			pool := e.Pools[e.ServerOf(p)]
			_ = pool.QueryRow(ctx, `SELECT next_offset FROM consumer_offsets WHERE topic = $1 AND "partition" = $2`, topic, p).Scan(&next)
			if next < end {
				return false, nil
			}
		}
		return true, nil
	}
	outboxEmpty := func() bool {
		for _, pool := range e.Pools {
			var n int64
			if pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n) != nil || n > 0 {
				return false
			}
		}
		return true
	}
	for {
		// The event topic first: what it applies fills the outboxes,
		// which fill the deliveries topic.
		events, err := caughtUp(e.Topic)
		if err == nil && events && outboxEmpty() {
			var deliveries bool
			if deliveries, err = caughtUp(e.Deliveries); err == nil && deliveries && outboxEmpty() {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the stages of %d servers not caught up after %v (last error: %v)", len(e.Pools), timeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Verify requires the invariants of projector.Verify to hold: on one
// server, on its database; on several, on each server by itself
// (VerifyServer), for every delivery across them (VerifyCrossing), and
// on the union of their state (the deployment read as one server). Call
// it caught up (WaitCaughtUp).
func (e *Env) Verify(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	if !e.Sharded() {
		rep, err := projector.Verify(ctx, e.Pool)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() {
			t.Fatalf("verify: %s", rep)
		}
		return
	}
	qs := make([]projector.Querier, len(e.Pools))
	for i, pool := range e.Pools {
		qs[i] = pool
		rep, err := projector.VerifyServer(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() {
			t.Fatalf("verify server %d: %s", i+1, rep)
		}
	}
	c, err := projector.VerifyCrossing(ctx, qs)
	if err != nil {
		t.Fatal(err)
	}
	if c.Violations > 0 {
		t.Fatalf("verify across servers: %d violations: %v", c.Violations, c.Samples)
	}
	rep, err := projector.Verify(ctx, e.Union(t))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("verify the union of the servers: %s", rep)
	}
}

// Replay rebuilds the projections from the log with cfg: on one server
// replay.Run of its database, on several replay.RunSharded of them all
// (one epoch for the deployment). Stop the fanout first.
func (e *Env) Replay(ctx context.Context, cfg replay.Config) (replay.Result, error) {
	if !e.Sharded() {
		return replay.Run(ctx, cfg, e.Pool)
	}
	return replay.RunSharded(ctx, cfg, replay.Servers{Pools: e.Pools, Map: e.Map, Partitions: e.Partitions, Deliveries: e.Deliveries})
}
