package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/projector"
)

// Defaults of Config.
const (
	DefaultGroup          = "inboxd-fanout"
	DefaultMaxPollRecords = 5000
	DefaultApplyWorkers   = 2
	DefaultRecordAttempts = 5
)

// Config configures a Fanout.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// Topic to consume. Default producer.DefaultTopic.
	Topic string
	// DLQTopic for poison records. Default Topic+".dlq".
	DLQTopic string
	// Group is the consumer group. Default DefaultGroup.
	Group string
	// MaxPollRecords bounds one batch (one transaction). Larger batches
	// amortise the per-transaction cost under load; an idle system still
	// commits each record as soon as it arrives. Default DefaultMaxPollRecords.
	MaxPollRecords int
	// ApplyWorkers splits each poll batch by partition (partition mod
	// ApplyWorkers) into transactions applied concurrently. A live batch
	// spends most of its time waiting on round trips and the commit's WAL
	// flush, so concurrent groups raise what one process sustains at the
	// same latency. Conversations never span partitions, so each
	// conversation's order is kept; users shared by groups are locked in id
	// order. Default DefaultApplyWorkers; 1 applies a poll in one
	// transaction.
	ApplyWorkers int
	// MaxBody is the body limit; longer messages go to the DLQ.
	// Default events.DefaultMaxBody.
	MaxBody int
	// Channel is the NOTIFY channel. Default projector.DefaultChannel.
	Channel string
	// MaxRetryInterval caps the backoff between retries of a failed batch.
	// Default 5s.
	MaxRetryInterval time.Duration
	// RecordAttempts bounds the attempts of one record that fails to apply
	// because of its data (projector.DataError) before it goes to the DLQ;
	// a batch failing that way is first split until the record is alone.
	// Transient failures are retried without bound and never
	// dead-letter. Default DefaultRecordAttempts.
	RecordAttempts int
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics. Default none.
	Registerer prometheus.Registerer
	// InstanceID makes this process a static group member (KIP-345): a
	// restarted process with the same id takes its partitions back at once
	// instead of waiting for a rebalance. Default none (dynamic member).
	InstanceID string
	// Retention is how long inbox entries are kept. Default 7 days.
	Retention time.Duration
	// RetentionInterval is the time between retention runs (only one runs
	// at a time across processes). Default 10m; negative disables them.
	RetentionInterval time.Duration
	// DrainTimeout bounds how long a batch in flight may still take to
	// commit once shutdown begins. Default 15s.
	DrainTimeout time.Duration
	// SessionTimeout after which a silent member loses its partitions.
	// Default 45s (Kafka's default).
	SessionTimeout time.Duration
}

func (c *Config) setDefaults() {
	if c.Topic == "" {
		c.Topic = producer.DefaultTopic
	}
	if c.DLQTopic == "" {
		c.DLQTopic = c.Topic + ".dlq"
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.MaxPollRecords == 0 {
		c.MaxPollRecords = DefaultMaxPollRecords
	}
	if c.MaxBody == 0 {
		c.MaxBody = events.DefaultMaxBody
	}
	if c.ApplyWorkers == 0 {
		c.ApplyWorkers = DefaultApplyWorkers
	}
	if c.RecordAttempts == 0 {
		c.RecordAttempts = DefaultRecordAttempts
	}
	if c.Retention == 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.RetentionInterval == 0 {
		c.RetentionInterval = 10 * time.Minute
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 15 * time.Second
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 45 * time.Second
	}
	if c.MaxRetryInterval == 0 {
		c.MaxRetryInterval = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("fanout: no brokers")
	}
	if c.MaxPollRecords < 1 {
		return fmt.Errorf("fanout: max poll records %d < 1", c.MaxPollRecords)
	}
	if c.ApplyWorkers < 1 {
		return fmt.Errorf("fanout: apply workers %d < 1", c.ApplyWorkers)
	}
	if c.RecordAttempts < 1 {
		return fmt.Errorf("fanout: record attempts %d < 1", c.RecordAttempts)
	}
	return nil
}

// Fanout consumes the topic into the projections.
type Fanout struct {
	cfg   Config
	pool  *pgxpool.Pool
	proj  *projector.Projector
	m     *metrics
	parts *partitions
}

// New returns a Fanout over pool (the schema must be migrated).
func New(cfg Config, pool *pgxpool.Pool) (*Fanout, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// The advisory lock and retention hold a connection each; the apply
	// workers share the rest.
	if most := int(pool.Config().MaxConns) - 2; cfg.ApplyWorkers > most {
		w := max(most, 1)
		cfg.Logger.Warn("fewer apply workers than configured: the PostgreSQL pool is small (raise --db-max-conns)",
			"apply_workers", cfg.ApplyWorkers, "using", w, "pool_max_conns", pool.Config().MaxConns)
		cfg.ApplyWorkers = w
	}
	proj, err := projector.New(projector.Config{Topic: cfg.Topic, Channel: cfg.Channel, Logger: cfg.Logger}, pool)
	if err != nil {
		return nil, err
	}
	m := newMetrics()
	parts := newPartitions()
	if cfg.Registerer != nil {
		if err := m.register(cfg.Registerer); err != nil {
			return nil, err
		}
		if err := cfg.Registerer.Register(parts); err != nil {
			return nil, err
		}
	}
	return &Fanout{cfg: cfg, pool: pool, proj: proj, m: m, parts: parts}, nil
}

// Ready is nil while every partition of this process projects; a
// *DegradedError names the partitions whose current batch keeps failing
// (for /readyz). It does not check PostgreSQL or Kafka themselves.
func (f *Fanout) Ready() error {
	if d := f.parts.degraded(); len(d) > 0 {
		return &DegradedError{Partitions: d}
	}
	return nil
}

const sqlLoadOffsets = `SELECT "partition", next_offset FROM consumer_offsets WHERE topic = $1 AND "partition" = ANY($2::int[])`

// adjustOffsets replaces the group's offsets with the ones stored in
// PostgreSQL beside the projections.
func (f *Fanout) adjustOffsets(ctx context.Context, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	out := map[string]map[int32]kgo.Offset{}
	for topic, parts := range assigned {
		ids := make([]int32, 0, len(parts))
		for p := range parts {
			ids = append(ids, p)
		}
		stored := map[int32]int64{}
		op := func() error {
			rows, err := f.pool.Query(ctx, sqlLoadOffsets, topic, ids)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var p int32
				var n int64
				if err := rows.Scan(&p, &n); err != nil {
					return err
				}
				stored[p] = n
			}
			return rows.Err()
		}
		if err := backoff.RetryNotify(op, backoff.WithContext(f.backoff(), ctx), func(err error, d time.Duration) {
			f.cfg.Logger.Warn("loading stored offsets failed, retrying", "topic", topic, "err", err, "retry_in", d)
		}); err != nil {
			return nil, fmt.Errorf("load offsets of %s: %w", topic, err)
		}
		out[topic] = map[int32]kgo.Offset{}
		for _, p := range ids {
			if n, ok := stored[p]; ok {
				out[topic][p] = kgo.NewOffset().At(n).WithEpoch(-1)
			} else {
				out[topic][p] = kgo.NewOffset().AtStart()
			}
		}
		f.cfg.Logger.Info("partitions assigned", "topic", topic, "partitions", ids, "stored", stored)
	}
	return out, nil
}

func (f *Fanout) backoff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = f.cfg.MaxRetryInterval
	b.MaxElapsedTime = 0 // retry until the context ends
	return b
}

// Run consumes until ctx ends. Errors of PostgreSQL or Kafka are retried;
// it returns nil on a clean stop.
func (f *Fanout) Run(ctx context.Context) error {
	// applyCtx outlives ctx by the drain timeout, so that a batch in
	// flight at shutdown still commits.
	applyCtx, applyCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer applyCancel()
	stopDrain := context.AfterFunc(ctx, func() { time.AfterFunc(f.cfg.DrainTimeout, applyCancel) })
	defer stopDrain()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	locked := make(chan struct{})
	wg.Add(2)
	go func() { defer wg.Done(); f.holdFanoutLock(ctx, f.pool, locked) }()
	go func() { defer wg.Done(); f.runRetention(ctx, f.pool) }()
	select {
	case <-locked:
	case <-ctx.Done():
		return nil
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(f.cfg.Brokers...),
		kgo.ClientID("inboxd-fanout"),
		kgo.ConsumerGroup(f.cfg.Group),
		kgo.ConsumeTopics(f.cfg.Topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.AdjustFetchOffsetsFn(f.adjustOffsets),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200 * time.Millisecond),
		// A lost broker connection refreshes metadata after 0.5 s rather
		// than franz-go's default 5 s, so fetches and dead letters resume
		// quickly.
		kgo.MetadataMinAge(500 * time.Millisecond),
		kgo.SessionTimeout(f.cfg.SessionTimeout),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			f.cfg.Logger.Info("partitions revoked", "partitions", m)
			f.parts.forget(m[f.cfg.Topic])
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			f.cfg.Logger.Warn("partitions lost", "partitions", m)
			f.parts.forget(m[f.cfg.Topic])
		}),
		// The DLQ is written by the same client: idempotent, acks=all.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
	}
	if f.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(f.cfg.InstanceID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("fanout client: %w", err)
	}
	// Close leaves the group, so a dynamic member's partitions move at
	// once; a static member (InstanceID) keeps them until it comes back or
	// its session times out, which is the point of static membership.
	defer cl.Close()
	f.cfg.Logger.Info("fanout started", "topic", f.cfg.Topic, "group", f.cfg.Group)
	for {
		fetches := cl.PollRecords(ctx, f.cfg.MaxPollRecords)
		if ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		if fetches.IsClientClosed() {
			return nil
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				f.cfg.Logger.Warn("fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		if err := f.process(ctx, applyCtx, cl, fetches); err != nil {
			cl.AllowRebalance()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		cl.AllowRebalance()
	}
}

// process decodes, dead-letters and applies one poll batch.
func (f *Fanout) process(ctx, applyCtx context.Context, cl *kgo.Client, fetches kgo.Fetches) error {
	var recs []projector.Record
	var dead []*kgo.Record
	fetches.EachRecord(func(r *kgo.Record) {
		e, err := events.Decode(r.Value, f.cfg.MaxBody)
		if err != nil {
			reason := err.Error()
			var inv *events.InvalidError
			if errors.As(err, &inv) {
				reason = inv.Reason
			}
			dead = append(dead, deadLetter(f.cfg.DLQTopic, r, reason))
			f.cfg.Logger.Error("poison record to DLQ", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason)
			recs = append(recs, projector.Record{Partition: r.Partition, Offset: r.Offset})
			return
		}
		recs = append(recs, projector.Record{Partition: r.Partition, Offset: r.Offset, Event: e})
	})
	if len(recs) == 0 {
		return nil
	}
	var polled []int32
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) > 0 {
			f.parts.fetched(p.Partition, p.Records[0].Timestamp)
			polled = append(polled, p.Partition)
		}
	})
	// Dead letters are written before the offsets move past them, so a crash
	// in between can duplicate a dead letter but never lose one.
	if len(dead) > 0 {
		op := func() error { return cl.ProduceSync(ctx, dead...).FirstErr() }
		if err := backoff.RetryNotify(op, backoff.WithContext(f.backoff(), ctx), func(err error, d time.Duration) {
			f.cfg.Logger.Warn("writing dead letters failed, retrying", "err", err, "retry_in", d)
		}); err != nil {
			return fmt.Errorf("write %d dead letters: %w", len(dead), err)
		}
		f.m.dead.Add(float64(len(dead)))
	}
	if err := f.applyGroups(ctx, applyCtx, cl, fetches, recs); err != nil {
		return err
	}
	f.parts.projected(polled)
	// Lag per partition: the log's high watermark as this fetch saw it,
	// minus the next offset to apply.
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if n := len(p.Records); n > 0 {
			f.m.lag.WithLabelValues(strconv.Itoa(int(p.Partition))).Set(float64(p.HighWatermark - (p.Records[n-1].Offset + 1)))
		}
	})
	return nil
}

// applyGroups applies recs as ApplyWorkers concurrent transactions, the
// records of a partition all in the same one and in order.
func (f *Fanout) applyGroups(ctx, applyCtx context.Context, cl *kgo.Client, fetches kgo.Fetches, recs []projector.Record) error {
	n := f.cfg.ApplyWorkers
	if n == 1 {
		return f.applyBatch(ctx, applyCtx, cl, fetches, recs)
	}
	groups := make([][]projector.Record, n)
	for _, r := range recs {
		i := int(r.Partition) % n
		groups[i] = append(groups[i], r)
	}
	var g errgroup.Group
	for _, grp := range groups {
		if len(grp) > 0 {
			g.Go(func() error { return f.applyBatch(ctx, applyCtx, cl, fetches, grp) })
		}
	}
	return g.Wait()
}

// isolateError ends the retries of a batch that fails because of the data
// of one of its records.
type isolateError struct{ err error }

func (e *isolateError) Error() string { return e.err.Error() }

// applyBatch applies recs in one transaction.
//
// A failure is handled by its projector.Class. Transient and systemic
// failures retry the same batch with backoff until they pass or ctx ends.
// A data failure splits the batch in halves, applied in order (so each
// partition keeps its order), until the failing record is alone; alone, it
// is tried RecordAttempts times, then probed (projector.Probe): if a copy
// with its text replaced applies, the record itself is the cause and goes
// to the DLQ; if not, the database refuses records of its shape, dropping
// it would not help, and it is retried like a systemic failure.
func (f *Fanout) applyBatch(ctx, applyCtx context.Context, cl *kgo.Client, fetches kgo.Fetches, recs []projector.Record) error {
	start := time.Now()
	first := firstOffsets(recs)
	attempts := 0
	var res projector.Result
	op := func() error {
		var err error
		// The batch in hand is finished even when shutdown begins, within
		// the drain timeout.
		res, err = f.proj.Apply(applyCtx, recs)
		if err == nil {
			return nil
		}
		attempts++
		class := projector.Classify(err)
		if class == projector.DataError && len(recs) == 1 && attempts >= f.cfg.RecordAttempts {
			if perr := f.proj.Probe(applyCtx, recs[0]); perr == nil {
				return backoff.Permanent(&isolateError{err})
			} else if projector.Classify(perr) != projector.Transient {
				class = projector.Systemic
				f.cfg.Logger.Error("a record fails to project and so does a copy with its text replaced: not dead-lettered, retrying",
					"topic", f.cfg.Topic, "partition", recs[0].Partition, "offset", recs[0].Offset, "err", err, "probe_err", perr)
			}
		}
		f.parts.failed(first, class.String(), err)
		f.m.failures.WithLabelValues(class.String()).Inc()
		if class == projector.DataError && len(recs) > 1 {
			f.cfg.Logger.Error("a batch fails on the data of a record: isolating it",
				"topic", f.cfg.Topic, "records", len(recs), "offsets", first, "err", err)
			return backoff.Permanent(&isolateError{err})
		}
		return err
	}
	notify := func(err error, d time.Duration) {
		f.m.retries.Inc()
		class := projector.Classify(err)
		args := []any{"topic", f.cfg.Topic, "records", len(recs), "offsets", first, "attempt", attempts, "class", class.String(), "err", err, "retry_in", d}
		if class == projector.Transient && attempts < 10 {
			f.cfg.Logger.Warn("applying batch failed, retrying", args...)
			return
		}
		// A partition that stays stuck is an ERROR with its offsets; the
		// backoff (capped at MaxRetryInterval) bounds the rate.
		f.cfg.Logger.Error("applying batch failed, partitions stuck, retrying", args...)
	}
	err := backoff.RetryNotify(op, backoff.WithContext(f.backoff(), ctx), notify)
	var iso *isolateError
	switch {
	case err == nil:
		f.m.observe(res, time.Since(start))
		if res.Rejected > 0 {
			f.cfg.Logger.Info("events rejected at their log position", "count", res.Rejected)
		}
		return nil
	case errors.As(err, &iso) && len(recs) > 1:
		mid := len(recs) / 2
		if err := f.applyBatch(ctx, applyCtx, cl, fetches, recs[:mid]); err != nil {
			return err
		}
		return f.applyBatch(ctx, applyCtx, cl, fetches, recs[mid:])
	case errors.As(err, &iso):
		return f.deadLetterRecord(ctx, applyCtx, cl, fetches, recs[0], iso.err)
	default:
		return fmt.Errorf("apply batch of %d records: %w", len(recs), err)
	}
}

// deadLetterRecord sends r, which fails to project because of its data, to
// the DLQ, then moves its partition past it: the event is stored as a
// rejection (projector.ReasonDeadLetter), so it takes no seq and a waiting
// sender is told. The dead letter is written before the offset moves, so a
// crash in between can duplicate it but never lose it.
func (f *Fanout) deadLetterRecord(ctx, applyCtx context.Context, cl *kgo.Client, fetches kgo.Fetches, r projector.Record, cause error) error {
	raw := findRecord(fetches, r.Partition, r.Offset)
	if raw == nil {
		// Cannot happen: r came from these fetches.
		return fmt.Errorf("dead-letter %d/%d: record not in its poll", r.Partition, r.Offset)
	}
	reason := "projection failed: " + cause.Error()
	op := func() error { return cl.ProduceSync(ctx, deadLetter(f.cfg.DLQTopic, raw, reason)).FirstErr() }
	if err := backoff.RetryNotify(op, backoff.WithContext(f.backoff(), ctx), func(err error, d time.Duration) {
		f.cfg.Logger.Warn("writing dead letters failed, retrying", "err", err, "retry_in", d)
	}); err != nil {
		return fmt.Errorf("dead-letter %d/%d: %w", r.Partition, r.Offset, err)
	}
	f.m.dead.Inc()
	f.cfg.Logger.Error("record dead-lettered: it fails to project",
		"topic", f.cfg.Topic, "partition", r.Partition, "offset", r.Offset, "dlq", f.cfg.DLQTopic, "reason", reason)
	dead := r
	dead.DeadLetter = true
	apply := func() error {
		_, err := f.proj.Apply(applyCtx, []projector.Record{dead})
		if err != nil && projector.Classify(err) != projector.Transient && dead.Event != nil {
			// The rejection row itself is refused: move the offset alone.
			f.cfg.Logger.Error("storing the dead letter's rejection failed: moving its offset only",
				"partition", r.Partition, "offset", r.Offset, "err", err)
			dead.Event = nil
		}
		return err
	}
	if err := backoff.RetryNotify(apply, backoff.WithContext(f.backoff(), ctx), func(err error, d time.Duration) {
		f.cfg.Logger.Warn("moving past a dead letter failed, retrying", "partition", r.Partition, "offset", r.Offset, "err", err, "retry_in", d)
	}); err != nil {
		return fmt.Errorf("move past dead letter %d/%d: %w", r.Partition, r.Offset, err)
	}
	return nil
}

// firstOffsets returns the first offset of each partition in recs.
func firstOffsets(recs []projector.Record) map[int32]int64 {
	out := map[int32]int64{}
	for _, r := range recs {
		if o, ok := out[r.Partition]; !ok || r.Offset < o {
			out[r.Partition] = r.Offset
		}
	}
	return out
}

// findRecord returns the fetched record at partition p, offset o.
func findRecord(fetches kgo.Fetches, p int32, o int64) *kgo.Record {
	var found *kgo.Record
	fetches.EachRecord(func(r *kgo.Record) {
		if found == nil && r.Partition == p && r.Offset == o {
			found = r
		}
	})
	return found
}

func deadLetter(topic string, r *kgo.Record, reason string) *kgo.Record {
	h := append([]kgo.RecordHeader{}, r.Headers...)
	h = append(h,
		kgo.RecordHeader{Key: "reason", Value: []byte(reason)},
		kgo.RecordHeader{Key: "source.topic", Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: "source.partition", Value: []byte(strconv.Itoa(int(r.Partition)))},
		kgo.RecordHeader{Key: "source.offset", Value: []byte(strconv.FormatInt(r.Offset, 10))},
	)
	return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: h}
}
