package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/schollz/progressbar/v3"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/term"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/migrations"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/projector"
)

// ErrFanoutRunning is returned when a fanout holds the projections.
var ErrFanoutRunning = errors.New("a fanout is running against this database (it holds the fanout advisory lock); stop every fanout before a replay, or use --verify")

// Config configures Run.
type Config struct {
	// Brokers to read the log from. Required.
	Brokers []string
	// Topic. Default events.DefaultTopic.
	Topic string
	// MaxBody as fanout's (records fanout sent to the DLQ are skipped the
	// same way). Default events.DefaultMaxBody.
	MaxBody int
	// BatchRecords per transaction. Default 20000.
	BatchRecords int
	// Shadow is the schema rebuilt into. Default "inboxd_shadow".
	Shadow string
	// Channel is the live NOTIFY channel (fanout's and the gateways'): the
	// swap announces the new epoch on it, so gateways drop what they
	// remember of the old one. Default projection.DefaultChannel.
	Channel string
	// LargeThreshold is projector.Config's: the fanout's, so that the
	// rebuilt modes are the live ones.
	LargeThreshold int
	// Verify compares the rebuilt shadow with the live projections instead
	// of swapping it in; it may run while fanout is live.
	Verify bool
	// Progress receives progress: a bar on a terminal, plain lines
	// otherwise. Default os.Stderr.
	Progress io.Writer
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Channel == "" {
		c.Channel = projection.DefaultChannel
	}
	if c.Topic == "" {
		c.Topic = events.DefaultTopic
	}
	if c.MaxBody == 0 {
		c.MaxBody = events.DefaultMaxBody
	}
	if c.BatchRecords == 0 {
		c.BatchRecords = 20000
	}
	if c.Shadow == "" {
		c.Shadow = "inboxd_shadow"
	}
	if c.Progress == nil {
		c.Progress = os.Stderr
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("replay: no brokers")
	}
	if c.Shadow == "public" {
		return errors.New("replay: the shadow schema cannot be public")
	}
	return nil
}

// Result says what a run did.
type Result struct {
	Records int64
	Invalid int64 // records skipped as undecodable (they are in the DLQ)
	// DeadLettered counts records that decoded but failed to project
	// because of their data: stored as rejections (ReasonDeadLetter).
	DeadLettered int64
	Duration     time.Duration
	Epoch        int64 // the new epoch (replay) or the live one (verify)
	Offsets      map[int32]int64
	Diff         *Diff // Verify only
	// ApplyTime is the part of Duration spent in projector transactions
	// (the rest is reading the log, the shadow set-up and the swap).
	ApplyTime time.Duration
}

// Rate is records per second.
func (r Result) Rate() float64 { return float64(r.Records) / r.Duration.Seconds() }

// Run rebuilds the projections of the database behind pool.
func Run(ctx context.Context, cfg Config, pool *pgxpool.Pool) (Result, error) {
	cfg.setDefaults()
	var res Result
	if err := cfg.validate(); err != nil {
		return res, err
	}
	start := time.Now()

	// The exclusive fanout lock, held on one connection for the whole run.
	lockConn, err := pool.Acquire(ctx)
	if err != nil {
		return res, err
	}
	defer lockConn.Release()
	if !cfg.Verify {
		if err := lockFanout(ctx, lockConn); err != nil {
			return res, err
		}
		defer lockConn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, projection.LockFanout) //nolint:errcheck
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		return res, err
	}
	defer cl.Close()
	end, total, err := endOffsets(ctx, cl, cfg.Topic)
	if err != nil {
		return res, err
	}
	res.Offsets = end
	cfg.Logger.Info("replay starting", "topic", cfg.Topic, "records", total, "shadow", cfg.Shadow, "verify", cfg.Verify)

	shadow, err := prepareShadow(ctx, pool, cfg.Shadow)
	if err != nil {
		return res, err
	}
	defer shadow.Close()
	if err := rebuild(ctx, cfg, cl, end, total, shadow, &res); err != nil {
		return res, err
	}
	res.Duration = time.Since(start)

	if cfg.Verify {
		err := verify(ctx, cfg, pool, shadow, &res)
		return res, err
	}
	shadow.Close()
	epoch, err := swap(ctx, pool, cfg.Shadow, cfg.Channel, 0)
	if err != nil {
		return res, err
	}
	res.Epoch = epoch
	res.Duration = time.Since(start)
	cfg.Logger.Info("replay done", "records", res.Records, "invalid", res.Invalid, "epoch", epoch,
		"seconds", res.Duration.Seconds(), "records_per_sec", res.Rate())
	return res, nil
}

// lockFanout takes the fanout advisory lock on conn, or fails with
// ErrFanoutRunning when a fanout holds it.
func lockFanout(ctx context.Context, conn *pgxpool.Conn) error {
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, projection.LockFanout).Scan(&got); err != nil {
		return fmt.Errorf("take the fanout lock: %w", err)
	}
	if !got {
		return ErrFanoutRunning
	}
	return nil
}

// endOffsets are the end offsets of topic's partitions, the end of the
// replay, and their sum.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, int64, error) {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, 0, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, 0, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	end := map[int32]int64{}
	var total int64
	ends.Each(func(o kadm.ListedOffset) {
		end[o.Partition] = o.Offset
		total += o.Offset
	})
	return end, total, nil
}

// rebuild projects the log up to end into the shadow, counting in res, and
// builds the primary keys left out for the bulk load.
func rebuild(ctx context.Context, cfg Config, cl *kgo.Client, end map[int32]int64, total int64, shadow *pgxpool.Pool, res *Result) error {
	proj, err := projector.New(projector.Config{Topic: cfg.Topic, Channel: "inboxd_replay", Logger: cfg.Logger,
		LargeThreshold: cfg.LargeThreshold}, shadow)
	if err != nil {
		return err
	}
	prog := newProgress(cfg.Progress, total)
	if err := project(ctx, cfg, cl, proj, end, prog, res); err != nil {
		return err
	}
	prog.finish(res.Records)
	return indexShadow(ctx, shadow)
}

// indexShadow builds the primary keys the bulk load left out.
func indexShadow(ctx context.Context, shadow *pgxpool.Pool) error {
	if _, err := shadow.Exec(ctx, `ALTER TABLE inbox ADD CONSTRAINT inbox_pkey PRIMARY KEY (user_id, inbox_seq);
ALTER TABLE messages ADD CONSTRAINT messages_pkey PRIMARY KEY (conversation_id, seq)`); err != nil {
		return fmt.Errorf("index the rebuilt inbox: %w", err)
	}
	return nil
}

// verify compares the rebuilt shadow with the live projections into
// res.Diff, reads the live epoch, and drops the shadow.
func verify(ctx context.Context, cfg Config, pool, shadow *pgxpool.Pool, res *Result) error {
	d, err := Compare(ctx, pool, shadow, cfg.Shadow)
	if err != nil {
		return err
	}
	res.Diff = &d
	if err := pool.QueryRow(ctx, `SELECT epoch FROM public.meta`).Scan(&res.Epoch); err != nil {
		return err
	}
	shadow.Close()
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{cfg.Shadow}.Sanitize()+" CASCADE")
	return nil
}

// prepareShadow (re)creates the shadow schema with the current migrations
// and returns a pool whose search_path is the shadow.
func prepareShadow(ctx context.Context, pool *pgxpool.Pool, schema string) (*pgxpool.Pool, error) {
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+q+" CASCADE"); err != nil {
		return nil, fmt.Errorf("drop old shadow %s: %w", schema, err)
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+q); err != nil {
		return nil, fmt.Errorf("create shadow %s: %w", schema, err)
	}
	cfg := pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	// The shadow is disposable until the swap: a crash loses nothing that
	// the log cannot rebuild, so commits need not wait for the WAL flush.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	cfg.MaxConns = 4
	sp, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := migrations.Up(ctx, sp); err != nil {
		sp.Close()
		return nil, fmt.Errorf("migrate shadow %s: %w", schema, err)
	}
	// Bulk path: the projector never reads the inbox, nor messages by
	// their primary key, so those keys are built once at the end (a sort)
	// instead of row by row.
	if _, err := sp.Exec(ctx, `ALTER TABLE inbox DROP CONSTRAINT inbox_pkey; ALTER TABLE messages DROP CONSTRAINT messages_pkey`); err != nil {
		sp.Close()
		return nil, fmt.Errorf("shadow bulk set-up: %w", err)
	}
	return sp, nil
}

// readLog reads every partition from 0 up to end and hands batches in log
// order per partition to apply. Reading the next batch overlaps with
// applying the current one.
func readLog(ctx context.Context, cl *kgo.Client, cfg Config, end map[int32]int64, apply func([]projector.Record, int64) error) error {
	parts := map[int32]kgo.Offset{}
	for p, e := range end {
		if e > 0 {
			parts[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(parts) == 0 {
		return nil
	}
	rc, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: parts}),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(16<<20))
	if err != nil {
		return err
	}
	defer rc.Close()
	type batch struct {
		recs    []projector.Record
		invalid int64
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan batch, 1)
	readErr := make(chan error, 1)
	go func() {
		defer close(batches)
		remaining := len(parts)
		done := map[int32]bool{}
		for remaining > 0 {
			fetches := rc.PollRecords(ctx, cfg.BatchRecords)
			if ctx.Err() != nil {
				readErr <- ctx.Err()
				return
			}
			var ferr error
			fetches.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("fetch %s/%d: %w", t, p, err) })
			if ferr != nil {
				readErr <- ferr
				return
			}
			var b batch
			fetches.EachRecord(func(r *kgo.Record) {
				if r.Offset >= end[r.Partition] {
					return
				}
				e, err := events.Decode(r.Value, cfg.MaxBody)
				if err != nil {
					b.invalid++
					e = nil
				}
				b.recs = append(b.recs, projector.Record{Partition: r.Partition, Offset: r.Offset, Event: e})
				if r.Offset == end[r.Partition]-1 && !done[r.Partition] {
					done[r.Partition] = true
					remaining--
				}
			})
			if len(b.recs) > 0 {
				select {
				case batches <- b:
				case <-ctx.Done():
					readErr <- ctx.Err()
					return
				}
			}
		}
		readErr <- nil
	}()
	for b := range batches {
		if err := apply(b.recs, b.invalid); err != nil {
			return fmt.Errorf("apply replay batch: %w", err)
		}
	}
	return <-readErr
}

// The projection tables moved by a swap (the read fan-out modes and the
// crossing of a sharded deployment's stages included); goose's own table,
// and what is not projected (settings, presence, body keys, API keys, the
// placement, notifications), stay.
var tables = []string{"meta", "conversations", "member_spans", "messages", "users", "inbox", "records", "rejections", "consumer_offsets",
	"reactions", "changes", "mentions", "conversation_modes", "outbox", "delivery_sources", "delivery_marks", "reports",
	"sanctions", "blocks"}

// swap makes the shadow the live generation in one transaction, with a new
// epoch (least when given, which is past the live one; else from the
// clock), keeping the live conversation id sequence ahead of every id.
func swap(ctx context.Context, pool *pgxpool.Pool, schema, channel string, least int64) (int64, error) {
	q := pgx.Identifier{schema}.Sanitize()
	var epoch int64
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var old int64
		if err := tx.QueryRow(ctx, `SELECT epoch FROM public.meta`).Scan(&old); err != nil {
			return fmt.Errorf("read live epoch: %w", err)
		}
		for _, t := range tables {
			if _, err := tx.Exec(ctx, "DROP TABLE public."+t); err != nil {
				return fmt.Errorf("drop live %s: %w", t, err)
			}
			if _, err := tx.Exec(ctx, "ALTER TABLE "+q+"."+t+" SET SCHEMA public"); err != nil {
				return fmt.Errorf("move %s: %w", t, err)
			}
		}
		if err := tx.QueryRow(ctx, `UPDATE public.meta SET epoch = greatest($1::bigint + 1,
	CASE WHEN $2::bigint > 0 THEN $2::bigint ELSE (extract(epoch FROM clock_timestamp()) * 1000)::bigint END) RETURNING epoch`, old, least).Scan(&epoch); err != nil {
			return fmt.Errorf("new epoch: %w", err)
		}
		if _, err := tx.Exec(ctx, `SELECT setval('public.conversation_ids', greatest((SELECT last_value FROM public.conversation_ids), (SELECT coalesce(max(id), 1) FROM public.conversations)))`); err != nil {
			return fmt.Errorf("advance conversation ids: %w", err)
		}
		if _, err := tx.Exec(ctx, "DROP SCHEMA "+q+" CASCADE"); err != nil {
			return fmt.Errorf("drop shadow: %w", err)
		}
		// Delivered at commit: gateways forget the heads of the old epoch.
		var note projection.Encoder
		note.Epoch(epoch)
		for _, pl := range note.Payloads() {
			if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, pl); err != nil {
				return fmt.Errorf("announce epoch %d: %w", epoch, err)
			}
		}
		return nil
	})
	return epoch, err
}

// progress shows records done/total, rate and ETA: a bar on a terminal,
// a plain line every few seconds otherwise (logs).
type progress struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	total int64
	start time.Time
	last  time.Time
}

func newProgress(w io.Writer, total int64) *progress {
	p := &progress{w: w, total: total, start: time.Now(), last: time.Now()}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("replay"),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("records"),
			progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(200*time.Millisecond))
	}
	return p
}

func (p *progress) set(done int64) {
	if p.bar != nil {
		_ = p.bar.Set64(done)
		return
	}
	if time.Since(p.last) < time.Second {
		return
	}
	p.last = time.Now()
	p.line(done)
}

func (p *progress) line(done int64) {
	el := time.Since(p.start).Seconds()
	rate := float64(done) / el
	eta := "?"
	if rate > 0 {
		eta = (time.Duration(float64(p.total-done)/rate) * time.Second).Round(time.Second).String()
	}
	fmt.Fprintf(p.w, "replay: %d/%d records (%.1f%%), %.0f records/s, ETA %s\n", done, p.total,
		100*float64(done)/float64(max(p.total, 1)), rate, eta)
}

func (p *progress) finish(done int64) {
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
	}
	p.line(done)
}
