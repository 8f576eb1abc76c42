package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projector"
)

// Defaults of Config.
const (
	DefaultGroup          = "inboxd-fanout"
	DefaultMaxPollRecords = 5000
	DefaultApplyWorkers   = 1
	DefaultRecordAttempts = 5
	// DefaultSessionTimeout is the lowest session timeout Kafka brokers
	// accept by default (group.min.session.timeout.ms).
	DefaultSessionTimeout   = 6 * time.Second
	DefaultRebalanceTimeout = 30 * time.Second
)

// Config configures a Fanout.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// Topic to consume. Default events.DefaultTopic.
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
	// ApplyWorkers) into transactions applied concurrently. Conversations
	// never span partitions, so each conversation's order is kept; users
	// shared by groups are locked in id order. A poll of more than a few
	// hundred records (catching up) is applied in one transaction whatever
	// this is: its groups would share users and wait on each other's locks
	// (splitMaxRecords). Default DefaultApplyWorkers, 1: every poll is one
	// transaction, so the transaction grows with the load (whatever queued
	// while the last one ran) and an idle fanout commits each record at
	// once; more workers trade commits for latency on a machine whose cores
	// are not full (docs/decisions.md, "Measured reasons behind defaults").
	ApplyWorkers int
	// MaxBody is the body limit; longer messages go to the DLQ.
	// Default events.DefaultMaxBody.
	MaxBody int
	// Channel is the NOTIFY channel. Default projection.DefaultChannel.
	Channel string
	// LargeThreshold is projector.Config's (read fan-out above it).
	LargeThreshold int
	// ConversationCache is projector.Config's: the conversations whose
	// state is kept between batches (negative: none).
	ConversationCache int
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
	// restarted process with the same id takes its partitions back at once,
	// with no rebalance. It must be unique among the running fanouts of the
	// group (cmd/inboxd derives one from the host name and the ops port).
	// A static member leaves the group explicitly at a clean stop, so its
	// partitions move at once then too. Default none (dynamic member).
	InstanceID string
	// Retention is how long inbox entries are kept. Default 7 days.
	Retention time.Duration
	// RetentionInterval is the time between retention runs (only one runs
	// at a time across processes). Default 10m; negative disables them.
	RetentionInterval time.Duration
	// DrainTimeout bounds how long a batch in flight may still take to
	// commit once shutdown begins. Default 15s.
	DrainTimeout time.Duration
	// SessionTimeout after which a silent member (a crashed process) loses
	// its partitions. Short, because the partitions of a crashed fanout are
	// not projected meanwhile; heartbeats go every SessionTimeout/6, from
	// their own goroutine, so a long batch does not miss them. Brokers
	// refuse values below their group.min.session.timeout.ms (6s by
	// default). Default DefaultSessionTimeout.
	SessionTimeout time.Duration
	// RebalanceTimeout bounds how long a rebalance waits for members to
	// rejoin; a member still applying a batch rejoins once it is committed.
	// Default DefaultRebalanceTimeout.
	RebalanceTimeout time.Duration
	// LogCheckInterval is the time between comparisons of the stored
	// offsets with the log (topic id, start and end offsets), which also
	// refresh the lag gauge. Default 5s.
	LogCheckInterval time.Duration
	// KafkaCommitInterval is the time between commits of the applied
	// offsets to the Kafka group, for standard lag tooling only (the
	// offsets in PostgreSQL are the truth; the group's are never read).
	// Default 5s; negative disables them.
	KafkaCommitInterval time.Duration
	// Owns, when set, makes this the conversation stage of one server of a
	// sharded deployment (docs/scaling.md): its group (one per server)
	// assigns only the partitions Owns accepts, those whose state the
	// placement puts on this server. Nil: every partition.
	Owns func(partition int32) bool
	// Users is projector.Config's: the entries of users on other servers
	// leave as deliveries (a Deliverer relays them). Nil: every user is
	// on this server.
	Users projector.UserPlacement
	// PlacementVersion is projector.Config's: the placement version this
	// process serves, refused by a server fenced at a later one.
	PlacementVersion int64
}

func (c *Config) setDefaults() {
	if c.Topic == "" {
		c.Topic = events.DefaultTopic
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
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = DefaultRebalanceTimeout
	}
	if c.LogCheckInterval == 0 {
		c.LogCheckInterval = 5 * time.Second
	}
	if c.KafkaCommitInterval == 0 {
		c.KafkaCommitInterval = 5 * time.Second
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
	guard *guard
	adm   *kadm.Client // log checks and assignment; set before the consumer starts
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
	proj, err := projector.New(projector.Config{Topic: cfg.Topic, Channel: cfg.Channel, Logger: cfg.Logger,
		LargeThreshold: cfg.LargeThreshold, Users: cfg.Users, PlacementVersion: cfg.PlacementVersion,
		ConversationCache: cfg.ConversationCache}, pool)
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
	g := newGuard(cfg.Topic, cfg.Logger)
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(g.gauge); err != nil {
			return nil, err
		}
	}
	return &Fanout{cfg: cfg, pool: pool, proj: proj, m: m, parts: parts, guard: g}, nil
}

// Forget makes the next batches read again what the projector keeps of
// the database between batches (projector.Projector.Forget): for a change
// made to the projections by hand while the fanout runs.
func (f *Fanout) Forget() { f.proj.Forget() }

// Ready is nil while every partition of this process projects; a
// *DegradedError names the partitions whose current batch keeps failing
// (for /readyz). It does not check PostgreSQL or Kafka themselves.
func (f *Fanout) Ready() error {
	if st := f.guard.stops(); len(st) > 0 {
		return &StoppedError{Partitions: st}
	}
	if d := f.parts.degraded(); len(d) > 0 {
		return &DegradedError{Partitions: d}
	}
	return nil
}

// adjustOffsets replaces the group's offsets with the ones stored in
// PostgreSQL beside the projections, after checking that they belong to
// the log: a partition whose stored offsets do not (the topic was
// recreated, the log lost or deleted records) is stopped rather than read
// from a position that would skip or misread records.
func (f *Fanout) adjustOffsets(ctx context.Context, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	out := map[string]map[int32]kgo.Offset{}
	for topic, parts := range assigned {
		ids := make([]int32, 0, len(parts))
		for p := range parts {
			ids = append(ids, p)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		var stored map[int32]*StoredOffset
		var ls LogState
		op := func() error {
			var err error
			if stored, err = LoadStoredOffsets(ctx, f.pool, topic); err != nil {
				return err
			}
			ls, err = InspectLog(ctx, f.adm, topic)
			return err
		}
		if err := backoff.RetryNotify(op, backoff.WithContext(f.backoff(), ctx), func(err error, d time.Duration) {
			f.cfg.Logger.Warn("loading stored offsets or the log's failed, retrying", "topic", topic, "err", err, "retry_in", d)
		}); err != nil {
			return nil, fmt.Errorf("load offsets of %s: %w", topic, err)
		}
		f.guard.setTopicID(ls.ID)
		out[topic] = map[int32]kgo.Offset{}
		start := map[int32]int64{}
		logged := map[int32]int64{}
		for _, p := range ids {
			st := stored[p]
			if reason, detail := Diagnose(p, st, ls); reason != "" {
				f.guard.stop(p, reason, detail)
			}
			if st != nil {
				out[topic][p] = kgo.NewOffset().At(st.Next).WithEpoch(-1)
				start[p], logged[p] = st.Next, st.Next
			} else {
				out[topic][p] = kgo.NewOffset().At(ls.Start[p]).WithEpoch(-1)
				start[p] = ls.Start[p]
			}
		}
		f.guard.assigned(start)
		if ls.ID != [16]byte{} {
			if _, err := f.pool.Exec(ctx, sqlLearnTopicID, topic, pgtype.UUID{Bytes: ls.ID, Valid: true}); err != nil {
				f.cfg.Logger.Warn("storing the topic id failed (the next log check retries)", "topic", topic, "err", err)
			}
		}
		f.cfg.Logger.Info("partitions assigned", "topic", topic, "partitions", ids, "stored", logged)
	}
	f.guard.check()
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
	for {
		err := f.consume(ctx, applyCtx)
		if !errors.Is(err, errRestartClient) {
			return err
		}
		f.cfg.Logger.Info("restarting the Kafka client", "why", strings.TrimPrefix(err.Error(), errRestartClient.Error()+": "))
	}
}

// errRestartClient ends consume so that Run starts over with a new client:
// after a topic was recreated, franz-go does not consume it again in the
// same client, and a new group session reloads every offset.
var errRestartClient = errors.New("restart the Kafka client")

// consume runs one Kafka client (one group membership) until ctx ends, an
// error, or errRestartClient.
func (f *Fanout) consume(ctx, applyCtx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := f.clientOpts()
	// Its own client for admin requests, set before the consumer's client
	// exists (whose group management calls adjustOffsets).
	admCl, err := kgo.NewClient(kgo.SeedBrokers(f.cfg.Brokers...), kgo.ClientID("inboxd-fanout-admin"), kgo.MetadataMinAge(500*time.Millisecond))
	if err != nil {
		return fmt.Errorf("fanout admin client: %w", err)
	}
	defer admCl.Close()
	f.adm = kadm.NewClient(admCl)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("fanout client: %w", err)
	}
	// Close leaves the group, so a dynamic member's partitions move at
	// once; a static member (InstanceID) is made to leave explicitly.
	defer f.leave(cl)
	var checks sync.WaitGroup
	// The log checks end before the client closes (defers run last first).
	defer checks.Wait()
	defer cancel()
	checks.Add(1)
	go func() { defer checks.Done(); f.runLogChecks(ctx) }()
	f.cfg.Logger.Info("fanout started", "topic", f.cfg.Topic, "group", f.cfg.Group, "instance_id", f.cfg.InstanceID,
		"session_timeout", f.cfg.SessionTimeout.String())
	fetchLog := newRateLog(f.cfg.Logger, 10*time.Second)
	var lastCommit time.Time
	for {
		// A bounded poll, so that partitions released by the log check
		// resume even when nothing else is fetched.
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollRecords(pctx, f.cfg.MaxPollRecords)
		pcancel()
		if ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		if fetches.IsClientClosed() {
			return nil
		}
		if why := f.guard.takeRestart(); why != "" {
			cl.AllowRebalance()
			f.guard.reset()
			return fmt.Errorf("%w: %s", errRestartClient, why)
		}
		fetchErrs := f.fetchErrors(fetches, fetchLog)
		kept, pause := f.guard.filter(fetches)
		if len(pause) > 0 {
			cl.PauseFetchPartitions(map[string][]int32{f.cfg.Topic: pause})
		}
		if err := f.process(ctx, applyCtx, cl, kept); err != nil {
			cl.AllowRebalance()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if f.cfg.KafkaCommitInterval > 0 && len(kept) > 0 && time.Since(lastCommit) >= f.cfg.KafkaCommitInterval {
			lastCommit = time.Now()
			f.commitToKafka(ctx, cl)
		}
		cl.AllowRebalance()
		if fetchErrs > 0 && len(kept) == 0 {
			// Errors only (a broker or the topic is gone): do not spin.
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
}

// process decodes, dead-letters and applies the records of one poll (in
// log order within each partition).
func (f *Fanout) process(ctx, applyCtx context.Context, cl *kgo.Client, kept []*kgo.Record) error {
	if len(kept) == 0 {
		return nil
	}
	recs := make([]projector.Record, 0, len(kept))
	var dead []*kgo.Record
	last := map[int32]int64{}
	var polled []int32
	for _, r := range kept {
		if _, seen := last[r.Partition]; !seen {
			f.parts.fetched(r.Partition, r.Timestamp)
			polled = append(polled, r.Partition)
		}
		last[r.Partition] = r.Offset
		e, err := events.Decode(r.Value, f.cfg.MaxBody)
		if err != nil {
			reason := err.Error()
			var inv *events.InvalidError
			if errors.As(err, &inv) {
				reason = inv.Reason
			}
			dead = append(dead, deadLetter(f.cfg.DLQTopic, r, reason))
			f.cfg.Logger.Error("poison record to DLQ", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason)
			recs = append(recs, projector.Record{Partition: r.Partition, Offset: r.Offset, Appended: r.Timestamp})
			continue
		}
		recs = append(recs, projector.Record{Partition: r.Partition, Offset: r.Offset, Event: e, Appended: r.Timestamp})
	}
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
	if err := f.applyGroups(ctx, applyCtx, cl, kept, recs); err != nil {
		return err
	}
	f.parts.projected(polled)
	f.guard.advanced(last)
	return nil
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

// fetchErrors logs the errors of a poll (rate-limited) and asks for a log
// check when one may mean the log changed; it returns how many there were.
func (f *Fanout) fetchErrors(fetches kgo.Fetches, fetchLog *rateLog) int {
	n := 0
	fetches.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		n++
		if errors.Is(err, kerr.OffsetOutOfRange) || errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.InconsistentTopicID) {
			f.guard.check() // the log check says what happened
		}
		fetchLog.Warn(t+"/"+strconv.Itoa(int(p))+"/"+err.Error(), "fetch error", "topic", t, "partition", p, "err", err)
	})
	return n
}
