package fanout_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
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

// Two servers, the second on a PostgreSQL server of its own, placed with
// `inboxd shards add-server` and `assign`; one `inboxd fanout
// --shard-server N` process each (conversation stage, relay and user
// stage). Under a paced workload with members on both servers, the
// processes are killed with SIGKILL at random, 30 times in all, and the
// second PostgreSQL server is restarted once; afterwards every message is
// in every member's inbox exactly once and in order, and the union of the
// servers is what the model says.
func TestShardedStagesKilledHard(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 4, Servers: 1} /* it adds its second server itself */)
	srv := pgtest.StartServer(t)
	secondURL := pgtest.NewDatabaseOn(t, srv.URL)
	shards := func(args ...string) {
		cmd := exec.Command(testenv.Binary(t), append([]string{"shards"}, args...)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+env.DatabaseURL, "INBOXD_LOG_LEVEL=warn")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	shards("add-server", "--dsn", secondURL)
	shards("assign", "--target-server", "2", "--partition-ids", "1,3")
	ctx := testenv.Ctx(t, 5*time.Minute)
	m, err := placement.Load(ctx, env.Pool)
	require.NoError(t, err)
	require.Equal(t, []int32{0, 2}, m.Partitions(1, 4))
	g := workload.New(workload.Config{Seed: 41, Users: 400, Conversations: 80,
		EditPct: 3, DeletePct: 2, ReactPct: 6, UnreactPct: 2, ReplyPct: 10})
	evs := generate(g, 16000)
	procEnv := func(server int) []string {
		return []string{"DATABASE_URL=" + env.DatabaseURL, "INBOXD_KAFKA_BROKERS=" + strings.Join(env.Brokers, ","),
			"INBOXD_TOPIC=" + env.Topic, "INBOXD_GROUP=killed", fmt.Sprintf("INBOXD_INSTANCE_ID=server-%d", server),
			fmt.Sprintf("INBOXD_SHARD_SERVER=%d", server), "INBOXD_SESSION_TIMEOUT=6s", "INBOXD_HTTP_ADDR=127.0.0.1:0",
			"INBOXD_MAX_POLL_RECORDS=5", "INBOXD_LOG_LEVEL=warn"}
	}
	procs := [2]*testenv.Proc{testenv.Start(t, procEnv(1), "fanout"), testenv.Start(t, procEnv(2), "fanout")}
	appendEvents(t, env.Producer, evs[:6000], true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 6000; i < len(evs); i += 250 {
			appendEvents(t, env.Producer, evs[i:min(i+250, len(evs))], true)
			time.Sleep(150 * time.Millisecond)
		}
	}()
	rnd := rand.New(rand.NewPCG(41, 41))
	var outboxRows, behind int
	for kill := range 30 {
		time.Sleep(time.Duration(200+rnd.IntN(600)) * time.Millisecond)
		i := rnd.IntN(2)
		var n int
		if kill != 16 { // the second server may still be starting
			_ = env.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n)
		}
		outboxRows += n
		var stored int
		_ = env.Pool.QueryRow(ctx, `SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets WHERE topic = $1`, env.Topic).Scan(&stored)
		if stored < 6000 {
			behind++
		}
		procs[i].Kill()
		procs[i] = testenv.Start(t, procEnv(i+1), "fanout")
		if kill == 15 {
			// The second server goes away for a while: its stages retry.
			require.NoError(t, srv.Stop())
			time.Sleep(2 * time.Second)
			srv2, err := srv.Restart(context.Background())
			require.NoError(t, err)
			t.Cleanup(func() { _ = srv2.Stop() })
		}
	}
	<-done
	second, err := pgxpool.New(context.Background(), secondURL)
	require.NoError(t, err)
	t.Cleanup(second.Close)
	s := &shardedEnv{Env: env, deliveries: env.Topic + ".deliveries",
		servers: shardtest.Servers{Pools: []*pgxpool.Pool{env.Pool, second}, Map: m, Partitions: 4, Topic: env.Topic}}
	s.waitCaughtUp(t)
	for i, p := range procs {
		require.NoError(t, p.Stop(20*time.Second), "server %d: %s", i+1, p.Output())
	}
	s.verifyCrossing(t)
	verify := exec.Command(testenv.Binary(t), "verify")
	verify.Env = append(os.Environ(), "DATABASE_URL="+env.DatabaseURL, "INBOXD_LOG_LEVEL=warn")
	out, err := verify.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Regexp(t, `X1\s+every delivery emitted is applied once, across servers\s+ok`, string(out))
	// inboxd offsets compares each server's stored offsets, of its own
	// partitions, with the log.
	for server, parts := range map[string][]string{"1": {"0", "2"}, "2": {"1", "3"}} {
		c := exec.Command(testenv.Binary(t), "offsets", "--shard-server", server)
		c.Env = append(os.Environ(), "DATABASE_URL="+env.DatabaseURL, "INBOXD_LOG_LEVEL=warn",
			"INBOXD_KAFKA_BROKERS="+strings.Join(env.Brokers, ","), "INBOXD_TOPIC="+env.Topic)
		out, err := c.CombinedOutput()
		require.NoError(t, err, "server %s: %s", server, out)
		for _, p := range []string{"0", "1", "2", "3"} {
			listed := regexp.MustCompile(`(?m)^` + p + `\s`).MatchString(string(out))
			require.Equal(t, slices.Contains(parts, p), listed, "server %s, partition %s:\n%s", server, p, out)
		}
	}
	t.Logf("30 kills, %d of them before server 1 had applied 6,000 records; %d outbox rows waiting on server 1 at the kills", behind, outboxRows)
	env.Pools, env.Map, env.Deliveries = s.servers.Pools, m, s.deliveries
	assertOutcome(t, env, g)
}
