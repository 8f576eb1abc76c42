package fanout_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/shardtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/projector"
)

// shardedEnv is a deployment on two servers (two databases): per server a
// conversation stage (a Fanout of its partitions) and a Deliverer (relay
// and user stage), on one Kafka.
type shardedEnv struct {
	*testenv.Env
	servers    shardtest.Servers
	deliveries string
}

func newShardedEnv(t *testing.T) *shardedEnv {
	env := testenv.New(t, testenv.Options{Partitions: 4, Servers: 1} /* it adds its second server itself */)
	second, _ := pgtest.NewPool(t)
	m := placement.NewMap(2, []placement.Server{{ID: 1, Name: "one"}, {ID: 2, Name: "two"}},
		placement.Assignment{Partition: 1, Server: 2}, placement.Assignment{Partition: 3, Server: 2})
	s := &shardedEnv{Env: env, deliveries: env.Topic + ".deliveries",
		servers: shardtest.Servers{Pools: []*pgxpool.Pool{env.Pool, second}, Map: m, Partitions: env.Partitions, Topic: env.Topic}}
	adm := kadm.NewClient(env.Producer.Client())
	ctx := testenv.Ctx(t, time.Minute)
	_, err := adm.CreateTopic(ctx, env.Partitions, 1, nil, s.deliveries)
	require.NoError(t, err)
	return s
}

// start runs server i's conversation stage and deliverer until the test
// ends.
func (s *shardedEnv) start(t *testing.T, i int) {
	server := int32(i + 1)
	owns := func(p int32) bool { return s.servers.Map.Server(p) == server }
	cfg := s.FanoutConfig()
	cfg.Group = fmt.Sprintf("%s.%d", cfg.Group, server)
	cfg.Owns = owns
	cfg.Users = placement.Users{Map: s.servers.Map, Server: server, Partitions: s.Partitions}
	f, err := fanout.New(cfg, s.servers.Pools[i])
	require.NoError(t, err)
	d, err := fanout.NewDeliverer(fanout.DelivererConfig{Brokers: s.Brokers, Topic: s.deliveries,
		Group: fmt.Sprintf("deliveries-%s.%d", s.Topic, server), Owns: owns, Logger: s.Logger,
		RelayInterval: 200 * time.Millisecond}, s.servers.Pools[i])
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- f.Run(ctx) }()
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			require.NoError(t, <-done)
		}
	})
}

// waitCaughtUp waits until both servers applied the event topic, the
// outboxes are empty and the user stages applied the deliveries topic.
func (s *shardedEnv) waitCaughtUp(t *testing.T) {
	ctx := testenv.Ctx(t, 3*time.Minute)
	require.NoError(t, s.Producer.Flush(ctx))
	adm := kadm.NewClient(s.Producer.Client())
	caughtUp := func(topic string) bool {
		ends, err := adm.ListEndOffsets(ctx, topic)
		require.NoError(t, err)
		ok := true
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset == 0 {
				return
			}
			var next int64
			pool := s.servers.Pools[s.servers.ServerOf(o.Partition)]
			_ = pool.QueryRow(ctx, `SELECT next_offset FROM consumer_offsets WHERE topic = $1 AND "partition" = $2`, topic, o.Partition).Scan(&next)
			ok = ok && next == o.Offset
		})
		return ok
	}
	outboxEmpty := func() bool {
		for _, pool := range s.servers.Pools {
			var n int64
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n))
			if n > 0 {
				return false
			}
		}
		return true
	}
	testenv.WaitFor(t, 3*time.Minute, "both stages caught up", func() bool {
		return caughtUp(s.Topic) && outboxEmpty() && caughtUp(s.deliveries)
	})
}

// verifyCrossing requires each server clean by itself and every delivery
// emitted to be applied once.
func (s *shardedEnv) verifyCrossing(t *testing.T) {
	qs := make([]projector.Querier, len(s.servers.Pools))
	for i, p := range s.servers.Pools {
		qs[i] = p
		rep, err := projector.VerifyServer(context.Background(), p)
		require.NoError(t, err)
		require.True(t, rep.OK(), "server %d: %v", i+1, rep)
	}
	c, err := projector.VerifyCrossing(context.Background(), qs)
	require.NoError(t, err)
	require.Zero(t, c.Violations, "%v", c.Samples)
}

// A randomized workload with duplicates on two servers, conversations
// with members on both: every conversation stage, relay and user stage
// runs through Kafka, and the deployment as a whole is what the model
// says, with I1-I8 over the union of the servers.
func TestShardedPipeline(t *testing.T) {
	s := newShardedEnv(t)
	s.start(t, 0)
	s.start(t, 1)
	g := workload.New(workload.Config{Seed: 31, Users: 300, Conversations: 60,
		EditPct: 3, DeletePct: 2, ReactPct: 6, UnreactPct: 2, ReplyPct: 10})
	evs := generate(g, 8000)
	for i := 0; i < len(evs); i += 2000 {
		appendEvents(t, s.Producer, evs[i:i+2000], true)
	}
	s.waitCaughtUp(t)
	s.verifyCrossing(t)
	s.Pools, s.Map, s.Deliveries = s.servers.Pools, s.servers.Map, s.deliveries
	assertOutcome(t, s.Env, g)
	var crossed int64
	for _, pool := range s.servers.Pools {
		var n int64
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT coalesce(sum(applied), 0) FROM delivery_marks`).Scan(&n))
		crossed += n
	}
	require.Positive(t, crossed, "deliveries crossed the servers")
	var rows int64
	require.NoError(t, s.Union(t).QueryRow(context.Background(), `SELECT count(*) FROM inbox`).Scan(&rows))
	t.Logf("%d inbox rows over two servers", rows)
}
