package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/internal/kgroup"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/projector"
)

// The crossing of a sharded projection (docs/scaling.md, "The two
// stages"), for one server: the relay produces the server's outbox to the
// deliveries topic, on each delivery's destination partition, and deletes
// what Kafka acknowledged; the user stage consumes the deliveries topic's
// partitions of the server's users and applies them
// (projector.ApplyDeliveries). A Fanout is the conversation stage beside
// them.
//
// The relay keeps the order that matters: the rows of one source
// partition commit in offset order, it reads them in id order and
// produces each destination's in that order (an idempotent producer, one
// partition each). A relay that crashes after producing and before
// deleting produces the same rows again after them, and a zombie relay
// only produces rows not yet deleted, in the same order: the first copy
// of every delivery reaches its partition after the first copies of the
// deliveries before it, and the user stage applies a delivery only when
// it is past its source's mark, so each is applied once.

// Defaults of DelivererConfig.
const (
	DefaultRelayBatch    = 1000
	DefaultRelayInterval = time.Second
)

// DelivererConfig configures a Deliverer.
type DelivererConfig struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// Topic is the deliveries topic. Default projector.DefaultDeliveries.
	Topic string
	// Group is the user stage's consumer group, one per server. Required.
	Group string
	// Owns says which partitions of the deliveries topic (the users'
	// partitions) this server holds. Required.
	Owns func(partition int32) bool
	// Channel is the NOTIFY channel of the user stage. Default
	// projection.DefaultChannel.
	Channel string
	// MaxPollRecords bounds one user-stage batch. Default
	// DefaultMaxPollRecords.
	MaxPollRecords int
	// RelayBatch bounds the outbox rows one relay round produces. Default
	// DefaultRelayBatch.
	RelayBatch int
	// RelayInterval is how often the relay looks at the outbox without a
	// notification, and a standby relay tries to take over. Default
	// DefaultRelayInterval.
	RelayInterval time.Duration
	// SessionTimeout of the user stage's group membership. Default
	// DefaultSessionTimeout.
	SessionTimeout time.Duration
	// InstanceID makes the user stage a static member of its group, as
	// Config.InstanceID does the fanout. Default none.
	InstanceID string
	// PlacementVersion is Config.PlacementVersion's, for the user stage.
	PlacementVersion int64
	// MaxRetryInterval caps the backoff between retries. Default 5s.
	MaxRetryInterval time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics. Default none.
	Registerer prometheus.Registerer
}

// Deliverer runs a server's relay and user stage.
type Deliverer struct {
	cfg  DelivererConfig
	pool *pgxpool.Pool
	proj *projector.Projector

	relayed, applied, copies, undecodable prometheus.Counter
	outboxAge                             prometheus.Gauge
	lag                                   *prometheus.GaugeVec // per partition of the deliveries topic
	failing                               *prometheus.GaugeVec // per part: 1 while it keeps failing
}

// stuckAfter is the consecutive failures of a part (the relay, the user
// stage) after which they are logged as errors and its failing gauge is 1.
const stuckAfter = 5

// NewDeliverer returns the Deliverer of the server of pool.
func NewDeliverer(cfg DelivererConfig, pool *pgxpool.Pool) (*Deliverer, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("deliverer: no brokers")
	}
	if cfg.Group == "" || cfg.Owns == nil {
		return nil, errors.New("deliverer: Group and Owns are required")
	}
	if cfg.Topic == "" {
		cfg.Topic = projector.DefaultDeliveries
	}
	if cfg.MaxPollRecords == 0 {
		cfg.MaxPollRecords = DefaultMaxPollRecords
	}
	if cfg.RelayBatch == 0 {
		cfg.RelayBatch = DefaultRelayBatch
	}
	if cfg.RelayInterval == 0 {
		cfg.RelayInterval = DefaultRelayInterval
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.MaxRetryInterval == 0 {
		cfg.MaxRetryInterval = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	proj, err := projector.New(projector.Config{Topic: cfg.Topic, Deliveries: cfg.Topic, Channel: cfg.Channel, Logger: cfg.Logger,
		PlacementVersion: cfg.PlacementVersion}, pool)
	if err != nil {
		return nil, err
	}
	d := &Deliverer{cfg: cfg, pool: pool, proj: proj,
		relayed: prometheus.NewCounter(prometheus.CounterOpts{Name: "inboxd_relay_deliveries_total",
			Help: "Outbox rows (deliveries to users on other servers) the relay produced to the deliveries topic and deleted."}),
		applied: prometheus.NewCounter(prometheus.CounterOpts{Name: "inboxd_user_stage_deliveries_total",
			Help: "Deliveries the user stage applied (their entries are in the users' inboxes)."}),
		copies: prometheus.NewCounter(prometheus.CounterOpts{Name: "inboxd_user_stage_copies_total",
			Help: "Records of the deliveries topic the user stage skipped as applied already (redelivered, or produced again by a relay)."}),
		undecodable: prometheus.NewCounter(prometheus.CounterOpts{Name: "inboxd_user_stage_undecodable_total",
			Help: "Records of the deliveries topic the user stage could not decode and skipped (their entries are lost: only a relay should write the topic)."}),
		outboxAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "inboxd_outbox_oldest_seconds",
			Help: "Age of the oldest outbox row at the relay's last look: how far deliveries to other servers lag."}),
		failing: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "inboxd_deliveries_failing",
			Help: "1 while the relay or the user stage (part) has failed " + strconv.Itoa(stuckAfter) + " times in a row: deliveries to other servers are stuck."}, []string{"part"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "inboxd_user_stage_lag_records",
			Help: "Records of the deliveries topic not yet applied, per partition this user stage holds, at its last fetch."}, []string{"partition"}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{d.relayed, d.applied, d.copies, d.undecodable, d.outboxAge, d.lag, d.failing} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

func (d *Deliverer) backoff(ctx context.Context) backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = d.cfg.MaxRetryInterval
	b.MaxElapsedTime = 0
	return backoff.WithContext(b, ctx)
}

// Run relays and applies deliveries until ctx ends; errors of PostgreSQL
// or Kafka are retried. It returns nil on a clean stop.
func (d *Deliverer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		d.retry(ctx, "relay", d.relay)
	}()
	go func() {
		defer wg.Done()
		d.retry(ctx, "user stage", d.consume)
	}()
	wg.Wait()
	return nil
}

// retry runs fn until ctx ends, with backoff between failures.
func (d *Deliverer) retry(ctx context.Context, what string, fn func(context.Context) error) {
	b := d.backoff(ctx)
	fails := 0
	for ctx.Err() == nil {
		start := time.Now()
		err := fn(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			b.Reset()
			fails = 0
		}
		wait := b.NextBackOff()
		if wait == backoff.Stop {
			return
		}
		fails++
		d.report(what, fails, "failed, retrying", "err", err, "retry_in", wait)
		sleepCtx(ctx, wait)
	}
}

// report logs the fails-th consecutive failure of part: a warning at
// first, an error (and its failing gauge at 1) once it keeps failing; 0
// fails clears the gauge.
func (d *Deliverer) report(part string, fails int, msg string, args ...any) {
	g := d.failing.WithLabelValues(part)
	switch {
	case fails == 0:
		g.Set(0)
	case fails < stuckAfter:
		d.cfg.Logger.Warn(part+" "+msg, append(args, "attempt", fails)...)
	default:
		g.Set(1)
		d.cfg.Logger.Error(part+" "+msg+": deliveries to other servers are stuck", append(args, "attempt", fails)...)
	}
}

// relay holds the server's relay lock and produces its outbox until ctx
// ends or an error.
func (d *Deliverer) relay(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.cfg.Brokers...), kgo.ClientID("inboxd-relay"),
		kgo.DefaultProduceTopic(d.cfg.Topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0), kgo.MetadataMinAge(500*time.Millisecond))
	if err != nil {
		return fmt.Errorf("relay client: %w", err)
	}
	defer cl.Close()
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("relay connection: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock_all()`); err != nil {
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}()
	for {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, projection.LockRelay).Scan(&got); err != nil {
			return fmt.Errorf("relay lock: %w", err)
		}
		if got {
			break
		}
		sleepCtx(ctx, d.cfg.RelayInterval) // another process relays this server's outbox
		if ctx.Err() != nil {
			return nil
		}
	}
	if _, err := conn.Exec(ctx, `LISTEN `+projector.OutboxChannel); err != nil {
		return fmt.Errorf("relay listen: %w", err)
	}
	d.cfg.Logger.Info("relaying the outbox", "topic", d.cfg.Topic)
	for ctx.Err() == nil {
		n, err := d.relayOnce(ctx, conn.Conn(), cl)
		if err != nil {
			return err
		}
		d.report("relay", 0, "")
		if n == d.cfg.RelayBatch {
			continue // more waiting
		}
		wctx, cancel := context.WithTimeout(ctx, d.cfg.RelayInterval)
		_, err = conn.Conn().WaitForNotification(wctx)
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("relay wait: %w", err)
		}
	}
	return nil
}

// relayOnce produces up to RelayBatch outbox rows in id order, then
// deletes them; it returns how many.
func (d *Deliverer) relayOnce(ctx context.Context, conn *pgx.Conn, cl *kgo.Client) (int, error) {
	rows, err := conn.Query(ctx, `SELECT id, destination, payload::text, extract(epoch FROM now() - created_at)::float8
FROM outbox ORDER BY id LIMIT $1`, d.cfg.RelayBatch)
	if err != nil {
		return 0, fmt.Errorf("read the outbox: %w", err)
	}
	var ids []int64
	var recs []*kgo.Record
	var oldest float64
	for rows.Next() {
		var id int64
		var dst int32
		var payload string
		var age float64
		if err := rows.Scan(&id, &dst, &payload, &age); err != nil {
			rows.Close()
			return 0, fmt.Errorf("read the outbox: %w", err)
		}
		if len(ids) == 0 {
			oldest = age
		}
		ids = append(ids, id)
		recs = append(recs, &kgo.Record{Partition: dst, Key: []byte(strconv.Itoa(int(dst))), Value: []byte(payload)})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read the outbox: %w", err)
	}
	d.outboxAge.Set(oldest)
	if len(ids) == 0 {
		return 0, nil
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("produce %d deliveries: %w", len(recs), err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM outbox WHERE id = ANY($1::bigint[])`, ids); err != nil {
		return 0, fmt.Errorf("delete %d relayed deliveries: %w", len(ids), err)
	}
	d.relayed.Add(float64(len(ids)))
	return len(ids), nil
}

// consume runs the user stage's group member until ctx ends or an error.
func (d *Deliverer) consume(ctx context.Context) error {
	opts := append(kgroup.Member{Brokers: d.cfg.Brokers, ClientID: "inboxd-user-stage", Group: d.cfg.Group, Topic: d.cfg.Topic,
		SessionTimeout: d.cfg.SessionTimeout, InstanceID: d.cfg.InstanceID, FetchMaxWait: 200 * time.Millisecond, Offsets: d.offsets,
		Owns: func(topic string, p int32) bool { return topic == d.cfg.Topic && d.cfg.Owns(p) }}.Opts(),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { d.forgetLag(m[d.cfg.Topic]) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { d.forgetLag(m[d.cfg.Topic]) }),
		kgo.DisableAutoCommit(), kgo.MetadataMinAge(500*time.Millisecond),
		// A stored offset the log no longer has (the topic's retention
		// passed it) stops the partition with a fetch error, never skips.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("user stage client: %w", err)
	}
	defer func() {
		cl.Close()
		leaveGroup(d.cfg.Brokers, d.cfg.Group, d.cfg.InstanceID, d.cfg.Logger)
	}()
	d.cfg.Logger.Info("user stage started", "topic", d.cfg.Topic, "group", d.cfg.Group)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollRecords(pctx, d.cfg.MaxPollRecords)
		cancel()
		if ctx.Err() != nil || fetches.IsClientClosed() {
			cl.AllowRebalance()
			return nil
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				d.cfg.Logger.Warn("fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if n := len(fp.Records); n > 0 {
				d.lag.WithLabelValues(strconv.Itoa(int(fp.Partition))).Set(float64(fp.HighWatermark - fp.Records[n-1].Offset - 1))
			}
		})
		var recs []projector.DeliveryRecord
		fetches.EachRecord(func(r *kgo.Record) {
			dr := projector.DeliveryRecord{Partition: r.Partition, Offset: r.Offset}
			var del projector.Delivery
			if err := json.Unmarshal(r.Value, &del); err != nil {
				// Only a relay writes this topic: a record it cannot decode
				// is corruption or another writer, and its entries are
				// lost. Counted and logged, never a stall of the partition.
				d.undecodable.Inc()
				d.cfg.Logger.Error("an undecodable delivery is skipped: its entries are lost", "partition", r.Partition, "offset", r.Offset, "err", err)
			} else {
				dr.Delivery = &del
			}
			recs = append(recs, dr)
		})
		if len(recs) > 0 {
			var res projector.Result
			op := func() error {
				var err error
				res, err = d.proj.ApplyDeliveries(ctx, recs)
				return err
			}
			fails := 0
			if err := backoff.RetryNotify(op, d.backoff(ctx), func(err error, wait time.Duration) {
				fails++
				d.report("user stage", fails, "applying deliveries failed, retrying", "records", len(recs), "err", err, "retry_in", wait)
			}); err != nil {
				cl.AllowRebalance()
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			d.report("user stage", 0, "")
			d.applied.Add(float64(res.Applied))
			d.copies.Add(float64(res.Copies + res.Skipped))
		}
		cl.AllowRebalance()
	}
}

// forgetLag drops the lag of partitions this user stage no longer holds.
func (d *Deliverer) forgetLag(ps []int32) {
	for _, p := range ps {
		d.lag.DeleteLabelValues(strconv.Itoa(int(p)))
	}
}

// offsets starts each assigned partition at its offset stored beside the
// users' inboxes, or at the log's start when none is stored yet.
func (d *Deliverer) offsets(ctx context.Context, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	out := map[string]map[int32]kgo.Offset{}
	for topic, parts := range assigned {
		var stored map[int32]*StoredOffset
		op := func() error {
			var err error
			stored, err = LoadStoredOffsets(ctx, d.pool, topic)
			return err
		}
		if err := backoff.Retry(op, d.backoff(ctx)); err != nil {
			return nil, fmt.Errorf("load offsets of %s: %w", topic, err)
		}
		out[topic] = map[int32]kgo.Offset{}
		ids := make([]int32, 0, len(parts))
		for p := range parts {
			ids = append(ids, p)
			if st := stored[p]; st != nil {
				out[topic][p] = kgo.NewOffset().At(st.Next).WithEpoch(-1)
			} else {
				out[topic][p] = kgo.NewOffset().AtStart()
			}
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		d.cfg.Logger.Info("user stage partitions assigned", "topic", topic, "partitions", ids)
	}
	return out, nil
}
