package fanout_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/workload"
)

// A randomized workload of 20,000 events over 200 conversations and 1,000
// users with members added and removed while messages flow, and every
// message record appended twice.
func TestRandomWorkloadWithDuplicates(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 8})
	env.StartFanout(t)
	g := workload.New(workload.Config{Seed: 1, Users: 1000, Conversations: 200,
		EditPct: 3, DeletePct: 2, ReactPct: 6, UnreactPct: 2, ReplyPct: 10})
	// In chunks, so that batches see membership change mid-stream.
	runWorkload(t, env, g, 20000, 2500, false)
	var dups int
	require.NoError(t, env.Union(t).QueryRow(context.Background(), `SELECT count(*) FROM messages`).Scan(&dups))
	require.Greater(t, dups, 15000)
}

// The same kind of workload applied by two concurrent transactions per
// poll (ApplyWorkers 2): chunks small enough that each poll is split by
// partition, so the two groups lock shared users while both run.
func TestRandomWorkloadTwoApplyWorkers(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 8})
	env.StartFanoutWith(t, func(c *fanout.Config) { c.ApplyWorkers = 2 })
	g := workload.New(workload.Config{Seed: 11, Users: 300, Conversations: 120,
		EditPct: 3, DeletePct: 2, ReactPct: 6, UnreactPct: 2, ReplyPct: 10})
	// Each chunk (300 records with its duplicates) caught up before the
	// next: no poll is large enough to be applied whole.
	runWorkload(t, env, g, 6000, 150, true)
}

// runWorkload appends n events of g, each with a duplicate, in chunks of
// chunk events (each caught up before the next when settle), waits for
// the fanout and checks the outcome.
func runWorkload(t *testing.T, env *testenv.Env, g *workload.Generator, n, chunk int, settle bool) {
	t.Helper()
	evs := generate(g, n)
	for i := 0; i < len(evs); i += chunk {
		appendEvents(t, env.Producer, evs[i:min(i+chunk, len(evs))], true)
		if settle {
			waitCaughtUp(t, env)
		}
	}
	waitCaughtUp(t, env)
	assertOutcome(t, env, g)
}

// The fanout process is killed with SIGKILL at random points, at least 20
// times, and restarted each time.
func TestFanoutKilledHard(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 6})
	g := workload.New(workload.Config{Seed: 2, Users: 1000, Conversations: 200,
		EditPct: 3, DeletePct: 2, ReactPct: 6, UnreactPct: 2, ReplyPct: 10})
	// Enough paced work to outlast the kills: the fanout applies a poll in
	// concurrent transactions and catches up quickly after each restart.
	evs := generate(g, 32000)
	procEnv := []string{"DATABASE_URL=" + env.DatabaseURL, "INBOXD_KAFKA_BROKERS=" + strings.Join(env.Brokers, ","),
		"INBOXD_TOPIC=" + env.Topic, "INBOXD_GROUP=killed", "INBOXD_INSTANCE_ID=fanout-a",
		"INBOXD_SESSION_TIMEOUT=6s", "INBOXD_HTTP_ADDR=127.0.0.1:0", "INBOXD_MAX_POLL_RECORDS=3", "INBOXD_LOG_LEVEL=warn"}
	rnd := rand.New(rand.NewPCG(7, 7))
	done := make(chan struct{})
	var appended atomic.Int64
	// A backlog first, then the rest paced over the kill phase, with tiny
	// batches (3 records a poll) so that the fanout, which applies a poll
	// in concurrent transactions and resumes at once as a static member,
	// does not catch up before most kills: kills land while there is work
	// in flight.
	appendEvents(t, env.Producer, evs[:12000], false)
	appended.Store(12000)
	go func() {
		defer close(done)
		for i := 12000; i < len(evs); i += 200 {
			appendEvents(t, env.Producer, evs[i:min(i+200, len(evs))], false)
			appended.Add(int64(min(200, len(evs)-i)))
			time.Sleep(200 * time.Millisecond)
		}
	}()
	// On several servers, each kill is of every server's fanout.
	kills, behind := 0, 0
	for kills < 20 {
		var ps []*testenv.Proc
		for _, pe := range env.FanoutProcs(procEnv) {
			ps = append(ps, testenv.Start(t, pe, "fanout"))
		}
		time.Sleep(time.Duration(300+rnd.IntN(700)) * time.Millisecond)
		if env.StoredOffsets(context.Background()) < appended.Load() {
			behind++ // killed with records still to apply
		}
		for _, p := range ps {
			p.Kill()
		}
		kills++
	}
	<-done
	require.GreaterOrEqual(t, behind, 10, "most kills must land while the fanout has work")
	var ps []*testenv.Proc
	for _, pe := range env.FanoutProcs(append(procEnv, "INBOXD_LOG_LEVEL=info")) {
		p := testenv.Start(t, pe, "fanout")
		require.NoError(t, p.WaitOutput("partitions assigned", time.Minute))
		ps = append(ps, p)
	}
	waitCaughtUp(t, env)
	for _, p := range ps {
		require.NoError(t, p.Stop(20*time.Second), p.Output())
	}
	t.Logf("fanout killed %d times, %d of them with records still to apply", kills, behind)
	assertOutcome(t, env, g)
}

// Two fanout processes in one group over overlapping users, with
// rebalances in the middle of the run: b joins and takes some of a's
// partitions, then leaves, and a takes them back, with conversations it
// had cached that b changed meanwhile (its conversation cache is behind
// and reads them again).
func TestTwoFanoutsRebalance(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 8})
	// Few users, so that nearly every batch of both processes touches the
	// same users.
	g := workload.New(workload.Config{Seed: 3, Users: 60, Conversations: 100, EditPct: 2, DeletePct: 1, ReactPct: 4, UnreactPct: 1})
	evs := generate(g, 16000)
	base := []string{"DATABASE_URL=" + env.DatabaseURL, "INBOXD_KAFKA_BROKERS=" + strings.Join(env.Brokers, ","),
		"INBOXD_TOPIC=" + env.Topic, "INBOXD_GROUP=pair", "INBOXD_SESSION_TIMEOUT=6s",
		"INBOXD_HTTP_ADDR=127.0.0.1:0", "INBOXD_MAX_POLL_RECORDS=300", "INBOXD_LOG_LEVEL=info"}
	// On several servers, a and b are a process per server each: every
	// server's group sees the join and the leave.
	start := func() []*testenv.Proc {
		var ps []*testenv.Proc
		for _, pe := range env.FanoutProcs(base) {
			ps = append(ps, testenv.Start(t, pe, "fanout"))
		}
		return ps
	}
	a := start()
	// Each process takes part before the next step: a stopped before its
	// first assignment (CI, 2 s into the run) takes part in nothing.
	for _, p := range a {
		require.NoError(t, p.WaitOutput("partitions assigned", time.Minute), p.Output())
	}
	appendEvents(t, env.Producer, evs[:4000], false)
	waitCaughtUp(t, env)
	b := start()
	// The join lands while these are applied; once b has its partitions,
	// it applies the rest of them, which a had cached.
	for i := 4000; i < 8000; i += 1000 {
		appendEvents(t, env.Producer, evs[i:i+1000], false)
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range b {
		require.NoError(t, p.WaitOutput("partitions assigned", time.Minute), p.Output())
	}
	appendEvents(t, env.Producer, evs[8000:12000], false)
	waitCaughtUp(t, env)
	for _, p := range b {
		require.NoError(t, p.Stop(20*time.Second), p.Output())
	}
	appendEvents(t, env.Producer, evs[12000:], false)
	waitCaughtUp(t, env)
	for _, p := range a {
		require.NoError(t, p.Stop(20*time.Second), p.Output())
	}
	for name, ps := range map[string][]*testenv.Proc{"a": a, "b": b} {
		for _, p := range ps {
			out := p.Output()
			require.NotContains(t, out, "deadlock", "fanout %s", name)
			require.NotContains(t, out, "could not serialize", "fanout %s", name)
			require.NotContains(t, out, "applying batch failed", "fanout %s", name)
			require.Contains(t, out, "partitions assigned", "fanout %s took part", name)
		}
	}
	behind := false
	for _, p := range a {
		require.Contains(t, p.Output(), "partitions revoked", "a saw a rebalance")
		behind = behind || strings.Contains(p.Output(), "cached conversations read again")
	}
	require.True(t, behind, "a took back partitions b had moved, and read their conversations again")
	assertOutcome(t, env, g)
}

// PostgreSQL is stopped in the middle of a run and started again: fanout
// waits with backoff and resumes by itself.
func TestPostgresRestart(t *testing.T) {
	srv := pgtest.StartServer(t)
	env := testenv.NewWithAdmin(t, testenv.Options{Partitions: 4}, srv.URL)
	stop := env.StartFanout(t)
	g := workload.New(workload.Config{Seed: 4, Users: 500, Conversations: 100})
	evs := generate(g, 6000)
	appendEvents(t, env.Producer, evs[:2000], false)
	waitCaughtUp(t, env)
	env.Pool.Reset()
	require.NoError(t, srv.Stop())
	appendEvents(t, env.Producer, evs[2000:4000], false)
	time.Sleep(3 * time.Second) // fanout retries against a stopped server
	srv2, err := srv.Restart(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv2.Stop() })
	appendEvents(t, env.Producer, evs[4000:], false)
	waitCaughtUp(t, env)
	stop()
	assertOutcome(t, env, g)
}

// Poison records land in the DLQ with a reason and the partition moves on;
// a non-member's send is rejected without consuming a seq.
func TestPoisonRecordsAndRejections(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 1})
	env.StartFanout(t)
	ctx := testenv.Ctx(t, time.Minute)
	c := events.New(events.ConversationCreated, 5, 1)
	c.Members = []int64{2}
	_, err := env.Producer.Append(ctx, c)
	require.NoError(t, err)
	valid := func(actor int64) []byte {
		e := events.New(events.MessageSent, 5, actor)
		e.MsgID = uuid.NewString()
		e.Body = events.Ptr("ok")
		raw, err := events.Encode(e, 0)
		require.NoError(t, err)
		return raw
	}
	base := string(valid(1))
	poison := map[string]string{
		"not JSON":            `{{{ not json`,
		"unknown type":        strings.Replace(base, `"message.sent"`, `"message.vanished"`, 1),
		"missing fields":      `{"v":1,"type":"message.sent"}`,
		"body over the limit": strings.Replace(base, `"body":"ok"`, `"body":"`+strings.Repeat("y", 5000)+`"`, 1),
		"wrong version":       strings.Replace(base, `"v":1`, `"v":9`, 1),
	}
	for _, v := range poison {
		require.NoError(t, env.Producer.AppendRaw(ctx, 5, "message.sent", []byte(v)))
	}
	require.NoError(t, env.Producer.AppendRaw(ctx, 5, "message.sent", valid(1)))
	require.NoError(t, env.Producer.AppendRaw(ctx, 5, "message.sent", valid(99))) // not a member
	require.NoError(t, env.Producer.AppendRaw(ctx, 5, "message.sent", valid(2)))
	waitCaughtUp(t, env)

	var last int64
	require.NoError(t, env.ConvPool(5).QueryRow(ctx, `SELECT last_seq FROM conversations WHERE id = 5`).Scan(&last))
	require.Equal(t, int64(3), last, "created + two member sends; the non-member's send took no seq")
	var reason string
	require.NoError(t, env.ConvPool(5).QueryRow(ctx, `SELECT reason FROM rejections WHERE actor_id = 99`).Scan(&reason))
	require.Equal(t, "not_member", reason)

	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(env.Topic+".dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var reasons []string
	for len(reasons) < len(poison) {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "DLQ has %d of %d records", len(reasons), len(poison))
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "reason" {
					reasons = append(reasons, string(h.Value))
				}
			}
		})
	}
	require.Len(t, reasons, len(poison))
	joined := strings.Join(reasons, "\n")
	for _, want := range []string{"not a JSON event", "unknown type", "event_id", "body over 4096 bytes", "unsupported version"} {
		require.Contains(t, joined, want)
	}
	env.Verify(t)
}

// SIGTERM under load: fanout finishes or abandons its batch within the
// drain timeout, exits cleanly, and a restart loses and doubles nothing.
func TestFanoutSigtermUnderLoad(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 4})
	g := workload.New(workload.Config{Seed: 6, Users: 300, Conversations: 60})
	evs := generate(g, 10000)
	procEnv := []string{"DATABASE_URL=" + env.DatabaseURL, "INBOXD_KAFKA_BROKERS=" + strings.Join(env.Brokers, ","),
		"INBOXD_TOPIC=" + env.Topic, "INBOXD_GROUP=term", "INBOXD_HTTP_ADDR=127.0.0.1:0",
		"INBOXD_MAX_POLL_RECORDS=100", "INBOXD_DRAIN_TIMEOUT=5s", "INBOXD_LOG_LEVEL=info"}
	appendEvents(t, env.Producer, evs[:6000], false)
	for round := 0; round < 3; round++ {
		// On several servers, a process per server, stopped together.
		var ps []*testenv.Proc
		for _, pe := range env.FanoutProcs(procEnv) {
			p := testenv.Start(t, pe, "fanout")
			require.NoError(t, p.WaitOutput("partitions assigned", time.Minute))
			ps = append(ps, p)
		}
		time.Sleep(200 * time.Millisecond)
		for _, p := range ps {
			start := time.Now()
			require.NoError(t, p.Stop(10*time.Second), "clean exit on SIGTERM:\n%s", p.Output())
			took := time.Since(start)
			require.Less(t, took, 10*time.Second, "exits within the drain timeout and group leave")
			t.Logf("round %d: exited %v after SIGTERM", round, took.Round(time.Millisecond))
		}
		if round == 0 {
			appendEvents(t, env.Producer, evs[6000:], false)
		}
	}
	var ps []*testenv.Proc
	for _, pe := range env.FanoutProcs(procEnv) {
		p := testenv.Start(t, pe, "fanout")
		require.NoError(t, p.WaitOutput("partitions assigned", time.Minute))
		ps = append(ps, p)
	}
	waitCaughtUp(t, env)
	for _, p := range ps {
		require.NoError(t, p.Stop(10*time.Second))
	}
	assertOutcome(t, env, g)
}
