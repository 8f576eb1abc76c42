package fanout_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/projector"
)

// syncBuffer is a log sink the test reads while the fanout writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// observedFanout is an in-process fanout whose readiness, metrics and logs
// the test watches; on several servers, every server's conversation stage
// (each with its own registry, all logging to one sink) and deliverer.
type observedFanout struct {
	fs   []*fanout.Fanout
	regs []*prometheus.Registry
	log  *syncBuffer
}

func startObservedFanout(t *testing.T, env *testenv.Env, edit func(*fanout.Config)) *observedFanout {
	t.Helper()
	o := &observedFanout{log: &syncBuffer{}}
	logger := slog.New(slog.NewJSONHandler(o.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	var runs []func(context.Context) error
	observe := func(cfg fanout.Config, pool *pgxpool.Pool) {
		reg := prometheus.NewRegistry()
		cfg.Registerer, cfg.Logger = reg, logger
		if edit != nil {
			edit(&cfg)
		}
		f, err := fanout.New(cfg, pool)
		require.NoError(t, err)
		o.fs, o.regs = append(o.fs, f), append(o.regs, reg)
		runs = append(runs, f.Run)
	}
	if !env.Sharded() {
		observe(env.FanoutConfig(), env.Pool)
	}
	for i, srv := range env.Map.Servers {
		if !env.Sharded() {
			break
		}
		cfg, dcfg := env.StageConfigs(env.Map, srv.ID)
		observe(cfg, env.Pools[i])
		d, err := fanout.NewDeliverer(dcfg, env.Pools[i])
		require.NoError(t, err)
		runs = append(runs, d.Run)
	}
	done := make(chan error, len(runs))
	for _, run := range runs {
		go func() { done <- run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range runs {
			require.NoError(t, <-done)
		}
	})
	return o
}

// Ready is the first conversation stage's error that is not nil.
func (o *observedFanout) Ready() error {
	for _, f := range o.fs {
		if err := f.Ready(); err != nil {
			return err
		}
	}
	return nil
}

// families are the metric families of every registry (a name once per
// server).
func (o *observedFanout) families(t testing.TB) []*dto.MetricFamily {
	t.Helper()
	var out []*dto.MetricFamily
	for _, reg := range o.regs {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		out = append(out, mfs...)
	}
	return out
}

// counter sums the counter name over the servers.
func (o *observedFanout) counter(t testing.TB, name string) (sum float64, found bool) {
	t.Helper()
	for _, mf := range o.families(t) {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			found = true
		}
	}
	return sum, found
}

// gauge returns the largest value of a per-partition gauge over the
// servers (-1 when absent).
func (o *observedFanout) gauge(t testing.TB, name string, partition int32) float64 {
	v := -1.0
	for _, mf := range o.families(t) {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelValue(m, "partition") == strconv.Itoa(int(partition)) {
				v = max(v, m.GetGauge().GetValue())
			}
		}
	}
	return v
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// stuckSeen is what a watcher saw of a partition while it was stuck.
type stuckSeen struct {
	degraded, failingGauge, ageGrew atomic.Bool
}

// watch polls Ready and the metrics until stop, recording what it saw of
// the partition at offset.
func (o *observedFanout) watch(t *testing.T, partition int32, offset int64) (seen *stuckSeen, stop func()) {
	seen = &stuckSeen{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if d, ok := o.Ready().(*fanout.DegradedError); ok {
				for _, p := range d.Partitions {
					if p.Partition == partition && p.Offset <= offset && p.Attempts > 0 {
						seen.degraded.Store(true)
					}
				}
			}
			if o.gauge(t, "inboxd_fanout_partition_failing", partition) == 1 {
				seen.failingGauge.Store(true)
			}
			if o.gauge(t, "inboxd_fanout_oldest_unprojected_seconds", partition) > 0.2 {
				seen.ageGrew.Store(true)
			}
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return seen, func() { close(done); wg.Wait() }
}

func sendEvent(t testing.TB, conv, actor int64, body string) *events.Event {
	t.Helper()
	e := events.New(events.MessageSent, conv, actor)
	e.MsgID = uuid.NewString()
	e.Body = events.Ptr(body)
	return e
}

// produceRaw appends value under conv's key, bypassing every check of the
// producer, and returns where it landed.
func produceRaw(t testing.TB, env *testenv.Env, conv int64, value []byte) (int32, int64) {
	t.Helper()
	ctx := testenv.Ctx(t, 30*time.Second)
	r := &kgo.Record{Topic: env.Topic, Key: events.Key(conv), Value: value,
		Headers: []kgo.RecordHeader{{Key: events.HeaderType, Value: []byte(events.MessageSent)}}}
	res := env.Producer.Client().ProduceSync(ctx, r)
	require.NoError(t, res.FirstErr())
	return res[0].Record.Partition, res[0].Record.Offset
}

func readDLQ(t testing.TB, env *testenv.Env, n int) []*kgo.Record {
	t.Helper()
	ctx := testenv.Ctx(t, time.Minute)
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(env.Topic+".dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "DLQ has %d of %d records", len(out), n)
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// A record that PostgreSQL refuses because of its own data (here a CHECK
// constraint on the body, standing for any value the database cannot
// store), appended straight to the topic: the batch holding it is split
// until the record is alone, the record is tried a bounded number of times
// and goes to the DLQ with its error, the records after it in its
// partition and in the other partitions are projected, its conversation's
// later messages take the next seq (no hole), and while it lasted the
// partition was reported by Ready, the metrics and an ERROR log line with
// its offset.
func TestPoisonRecordIsDeadLetteredAndThePartitionMovesOn(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 4})
	ctx := testenv.Ctx(t, 3*time.Minute)
	for _, pool := range env.Pools {
		_, err := pool.Exec(ctx, `ALTER TABLE messages ADD CONSTRAINT no_poison CHECK (body NOT LIKE '%poison-pill%')`)
		require.NoError(t, err)
	}

	// Six conversations over the partitions, each with members 1 and 2.
	const convs = 6
	for c := int64(1); c <= convs; c++ {
		e := events.New(events.ConversationCreated, c, 1)
		e.Members = []int64{2}
		_, err := env.Producer.Append(ctx, e)
		require.NoError(t, err)
	}
	// A backlog before the fanout starts, so the poison is in the middle
	// of a large batch: conversation 1 gets messages, the poison, more.
	var before, after []*events.Event
	for c := int64(1); c <= convs; c++ {
		for i := 0; i < 20; i++ {
			before = append(before, sendEvent(t, c, 1+int64(i%2), "before"))
		}
	}
	appendEvents(t, env.Producer, before, false)
	poison := sendEvent(t, 1, 2, "a poison-pill message")
	raw, err := events.Encode(poison, 0)
	require.NoError(t, err)
	part, off := produceRaw(t, env, 1, raw)
	// A NUL byte, which PostgreSQL's text cannot hold, straight to the log.
	nul := strings.Replace(string(mustEncode(t, sendEvent(t, 1, 1, "nul here"))), "nul here", `nul \u0000 byte`, 1)
	_, nulOff := produceRaw(t, env, 1, []byte(nul))
	for c := int64(1); c <= convs; c++ {
		for i := 0; i < 20; i++ {
			after = append(after, sendEvent(t, c, 1+int64(i%2), "after"))
		}
	}
	appendEvents(t, env.Producer, after, false)

	o := startObservedFanout(t, env, func(c *fanout.Config) {
		c.RecordAttempts = 4
		c.MaxRetryInterval = 300 * time.Millisecond
	})
	seen, stopWatch := o.watch(t, part, off)
	env.WaitCaughtUp(t, time.Minute)
	stopWatch()

	require.True(t, seen.degraded.Load(), "Ready reported the partition degraded while the poison was retried")
	require.True(t, seen.failingGauge.Load(), "inboxd_fanout_partition_failing was 1 while it lasted")
	require.True(t, seen.ageGrew.Load(), "inboxd_fanout_oldest_unprojected_seconds grew while it lasted")
	// The stored offsets (what WaitCaughtUp reads) are committed before the
	// poll's partitions are marked projected: ready comes a moment later
	// (CI under -race: Ready still listed both partitions' split batch).
	require.Eventually(t, func() bool { return o.Ready() == nil }, 10*time.Second, 20*time.Millisecond,
		"ready again once the partition moved on: %v", o.Ready())
	require.Equal(t, 0.0, o.gauge(t, "inboxd_fanout_partition_failing", part))
	logs := o.log.String()
	require.Contains(t, logs, `"level":"ERROR","msg":"record dead-lettered: it fails to project"`)
	require.Contains(t, logs, `"offset":`+strconv.FormatInt(off, 10))

	// The DLQ holds both, with their reasons and source positions.
	dlq := readDLQ(t, env, 2)
	byOffset := map[string]*kgo.Record{}
	for _, r := range dlq {
		require.Equal(t, strconv.Itoa(int(part)), header(r, "source.partition"))
		byOffset[header(r, "source.offset")] = r
	}
	pr := byOffset[strconv.FormatInt(off, 10)]
	require.NotNil(t, pr, "the poison record is in the DLQ")
	require.Equal(t, raw, pr.Value, "the DLQ keeps the record as it was")
	require.Contains(t, header(pr, "reason"), "no_poison")
	require.NotNil(t, byOffset[strconv.FormatInt(nulOff, 10)], "the NUL record is in the DLQ")

	// Conversation 1: created + 20 + 20 messages, the poison and the NUL
	// took no seq; every other conversation: created + 40.
	got := lastSeqs(t, env)
	for c := int64(1); c <= convs; c++ {
		require.Equal(t, int64(41), got[c], "conversation %d", c)
	}
	var reason string
	require.NoError(t, env.ConvPool(1).QueryRow(ctx, `SELECT reason FROM rejections WHERE msg_id = $1`, poison.MsgID).Scan(&reason))
	require.Equal(t, projection.ReasonDeadLetter, reason, "a waiting sender can learn that its message was dead-lettered")
	env.Verify(t)
	assertDLQCount(t, o, 2)
}

// A failure that is not the record's own (a constraint that every message
// breaks, standing for a broken migration): the record is isolated and
// probed, the probe fails too, so nothing is dead-lettered. The partition
// is stuck, loudly, until the database is fixed; then everything projects.
func TestSystemicFailureStopsThePartitionLoudlyAndDropsNothing(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 2})
	ctx := testenv.Ctx(t, 3*time.Minute)
	c := events.New(events.ConversationCreated, 7, 1)
	c.Members = []int64{2}
	_, err := env.Producer.Append(ctx, c)
	require.NoError(t, err)
	for _, pool := range env.Pools {
		_, err = pool.Exec(ctx, `ALTER TABLE messages ADD CONSTRAINT broken CHECK (kind <> 'text')`)
		require.NoError(t, err)
	}
	var sends []*events.Event
	for i := 0; i < 10; i++ {
		sends = append(sends, sendEvent(t, 7, 1, "hello "+strconv.Itoa(i)))
	}
	appendEvents(t, env.Producer, sends, false)
	o := startObservedFanout(t, env, func(c *fanout.Config) {
		c.RecordAttempts = 2
		c.MaxRetryInterval = 200 * time.Millisecond
	})
	var deg *fanout.DegradedError
	require.Eventually(t, func() bool {
		d, ok := o.Ready().(*fanout.DegradedError)
		if ok && len(d.Partitions) > 0 && d.Partitions[0].Class == projector.Systemic.String() {
			deg = d
			return true
		}
		return false
	}, time.Minute, 20*time.Millisecond, "the stuck partition is reported as systemic")
	require.Contains(t, deg.Error(), "broken")
	// Stuck for a while: retried, never dead-lettered, never skipped.
	time.Sleep(1500 * time.Millisecond)
	require.Error(t, o.Ready())
	require.Equal(t, int64(1), lastSeq(t, env, 7), "no message projected while the database refuses them")
	require.Contains(t, o.log.String(), `"level":"ERROR","msg":"a record fails to project and so does a copy with its text replaced`)
	assertDLQCount(t, o, 0)

	for _, pool := range env.Pools {
		_, err = pool.Exec(ctx, `ALTER TABLE messages DROP CONSTRAINT broken`)
		require.NoError(t, err)
	}
	env.WaitCaughtUp(t, time.Minute)
	require.Eventually(t, func() bool { return o.Ready() == nil }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, int64(11), lastSeq(t, env, 7), "every message projected once the database is fixed")
	assertDLQCount(t, o, 0)
	env.Verify(t)
}

func assertDLQCount(t testing.TB, o *observedFanout, want float64) {
	t.Helper()
	got, found := o.counter(t, "inboxd_fanout_dead_letters_total")
	require.True(t, found, "inboxd_fanout_dead_letters_total not exported")
	require.Equal(t, want, got)
}

func mustEncode(t testing.TB, e *events.Event) []byte {
	t.Helper()
	raw, err := events.Encode(e, 0)
	require.NoError(t, err)
	return raw
}

// TestRecordLatencyObserved: every applied record is observed once in
// inboxd_fanout_record_latency_seconds, queued (log timestamp -> its
// transaction's start) and committed (-> the commit), and no record is
// committed before it was queued.
func TestRecordLatencyObserved(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 4})
	ctx := testenv.Ctx(t, 2*time.Minute)
	o := startObservedFanout(t, env, nil)
	var evs []*events.Event
	for c := int64(1); c <= 3; c++ {
		e := events.New(events.ConversationCreated, c, 1)
		e.Members = []int64{2}
		_, err := env.Producer.Append(ctx, e)
		require.NoError(t, err)
		for i := 0; i < 10; i++ {
			evs = append(evs, sendEvent(t, c, 1+int64(i%2), "timed"))
		}
	}
	appendEvents(t, env.Producer, evs, false)
	env.WaitCaughtUp(t, time.Minute)

	records, _ := o.counter(t, "inboxd_fanout_records_total")
	type sums struct {
		count uint64
		sum   float64
	}
	hists := map[string]*sums{}
	for _, mf := range o.families(t) {
		if mf.GetName() == "inboxd_fanout_record_latency_seconds" {
			for _, m := range mf.GetMetric() {
				stage := labelValue(m, "stage")
				if hists[stage] == nil {
					hists[stage] = &sums{}
				}
				hists[stage].count += m.GetHistogram().GetSampleCount()
				hists[stage].sum += m.GetHistogram().GetSampleSum()
			}
		}
	}
	require.Equal(t, float64(33), records)
	for _, stage := range []string{"queued", "committed"} {
		require.Contains(t, hists, stage)
		require.Equal(t, uint64(records), hists[stage].count, "one observation per record applied, stage %s", stage)
	}
	require.GreaterOrEqual(t, hists["committed"].sum, hists["queued"].sum)
}
