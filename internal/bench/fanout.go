package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/projector"
	"github.com/inboxd/inboxd/replay"
)

// FanoutConfig configures Fanout. Zero fields take the defaults in brackets.
type FanoutConfig struct {
	Messages       int // [100000]
	Members        int // [7] per conversation
	Conversations  int // [2000]
	Partitions     int // [12]
	MaxPollRecords int // [5000] fanout batch size
	// SkipReplay leaves out the replay figure (bench all measures it
	// once, with 7 members).
	SkipReplay bool
}

func (c *FanoutConfig) setDefaults() {
	setDefault(&c.Messages, 100000)
	setDefault(&c.Members, 7)
	setDefault(&c.Conversations, 2000)
	setDefault(&c.Partitions, 12)
	setDefault(&c.MaxPollRecords, 5000)
}

// FanoutResult is the outcome of Fanout.
type FanoutResult struct {
	Messages        int     `json:"messages"`
	Members         int     `json:"members"`
	InboxRows       int64   `json:"inbox_rows"`
	Seconds         float64 `json:"seconds"`
	RowsPerSec      float64 `json:"inbox_rows_per_sec"`
	CopyRows        int64   `json:"copy_rows"`
	CopySeconds     float64 `json:"copy_seconds"`
	CopyRowsPerSec  float64 `json:"copy_rows_per_sec"`
	Ratio           float64 `json:"ratio_to_copy"`
	IdleP50Ms       float64 `json:"idle_append_to_notify_p50_ms"`
	IdleP99Ms       float64 `json:"idle_append_to_notify_p99_ms"`
	IdleBatchMeanMs float64 `json:"idle_batch_apply_mean_ms"`
	IdleCommitP50Ms float64 `json:"idle_commit_p50_ms"`
	IdleCommitP99Ms float64 `json:"idle_commit_p99_ms"`
	VerifyOK        bool    `json:"verify_ok"`
	LiveRecPerSec   float64 `json:"live_records_per_sec"`
	ReplayRecPerSec float64 `json:"replay_records_per_sec,omitempty"`
	ReplayRatio     float64 `json:"replay_ratio_to_live,omitempty"`
}

// Rows implements Result.
func (r FanoutResult) Rows() []Row {
	rows := []Row{{
		Figure:    fmt.Sprintf("fan-out, committed inbox rows/s (%d members, %s messages, producer -> kfake -> fanout -> PostgreSQL)", r.Members, num(float64(r.Messages))),
		Value:     num(r.RowsPerSec),
		Reference: fmt.Sprintf("plain COPY of the same %s inbox rows into an identical table: %s rows/s", num(float64(r.CopyRows)), num(r.CopyRowsPerSec)),
		Ratio:     ratio(r.RowsPerSec, r.CopyRowsPerSec),
	}, {
		Figure:    fmt.Sprintf("idle fan-out (%d members): append -> NOTIFY of its commit, p50 / p99", r.Members),
		Value:     fmt.Sprintf("%s / %s", ms(r.IdleP50Ms), ms(r.IdleP99Ms)),
		Reference: fmt.Sprintf("single-row INSERT+COMMIT round trip, same phase: %s / %s", ms(r.IdleCommitP50Ms), ms(r.IdleCommitP99Ms)),
		Ratio:     fmt.Sprintf("p50 %s, p99 %s", ratio(r.IdleP50Ms, r.IdleCommitP50Ms), ratio(r.IdleP99Ms, r.IdleCommitP99Ms)),
	}}
	if r.ReplayRecPerSec > 0 {
		rows = append(rows, Row{
			Figure:    fmt.Sprintf("replay (rebuild from offset 0, %d members), records/s", r.Members),
			Value:     num(r.ReplayRecPerSec),
			Reference: fmt.Sprintf("live fan-out of the same log: %s records/s", num(r.LiveRecPerSec)),
			Ratio:     ratio(r.ReplayRecPerSec, r.LiveRecPerSec),
		})
	}
	return rows
}

// Print writes the result table and the invariant check.
func (r FanoutResult) Print(w io.Writer) {
	WriteTable(w, r.Rows())
	fmt.Fprintf(w, "\nverify after the run: %v\n", map[bool]string{true: "all invariants hold", false: "VIOLATED"}[r.VerifyOK])
}

// Fanout measures end-to-end committed inbox rows per second: messages
// appended through the producer to an in-process kfake, consumed by an
// in-process fanout into PostgreSQL, until the stored offsets reach the end
// of the log; then a plain COPY of the same number of inbox-shaped rows into
// an identically indexed table, on the same server. Before the load, the
// idle latency (one message at a time); after it, unless cfg.SkipReplay, a
// replay of the whole log against the live rate.
func Fanout(ctx context.Context, env *Env, cfg FanoutConfig) (FanoutResult, error) {
	cfg.setDefaults()
	progress := env.Progress
	res := FanoutResult{Messages: cfg.Messages, Members: cfg.Members}
	log := env.Log
	pl, err := env.newPipeline(ctx, "fanout", cfg.Partitions)
	if err != nil {
		return res, err
	}
	defer pl.Close()
	pool, prod := pl.pool, pl.prod
	reg, stopFanout, err := pl.startFanout(ctx, env, fanout.Config{MaxPollRecords: cfg.MaxPollRecords})
	if err != nil {
		return res, err
	}
	defer stopFanout()

	// Conversations of cfg.Members distinct members over a shared user set.
	users := int64(max(cfg.Conversations*cfg.Members/4, cfg.Members))
	senders := make([]int64, cfg.Conversations)
	for i := 0; i < cfg.Conversations; i++ {
		base := int64(i * 7919)
		e := events.New(events.ConversationCreated, int64(i+1), 1+base%users)
		for k := 1; k < cfg.Members; k++ {
			e.Members = append(e.Members, 1+(base+int64(k))%users)
		}
		senders[i] = e.ActorID
		prod.AppendAsync(ctx, e, func(_ producer.Position, err error) {
			if err != nil {
				log.Error("append", "err", err)
			}
		})
	}
	if err := testenv.WaitCaughtUp(ctx, pool, prod, 5*time.Minute); err != nil {
		return res, err
	}
	fmt.Fprintf(progress, "bench fanout: %d conversations of %d members created\n", cfg.Conversations, cfg.Members)
	// The measured phases run on a database as autovacuum keeps it in
	// production: analyzed, so that the fanout's cached plans are made for
	// tables with rows (the first were made when they were empty, and a
	// sequential scan planned then stays until an ANALYZE happens to run
	// in the middle of the load).
	if _, err := pl.settle(ctx); err != nil {
		return res, err
	}

	// Idle latency: one message at a time, append -> NOTIFY of its commit,
	// and the projector's own time per batch over the same phase.
	sum0, n0 := batchSeconds(reg)
	if err := idleLatency(ctx, pool, prod, senders, &res); err != nil {
		return res, err
	}
	if sum1, n1 := batchSeconds(reg); n1 > n0 {
		res.IdleBatchMeanMs = (sum1 - sum0) / float64(n1-n0) * 1000
	}
	var rowsBefore int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM inbox`).Scan(&rowsBefore); err != nil {
		return res, err
	}

	body := strings.Repeat("x", 32)
	start := time.Now()
	errs := make(chan error, 1)
	for i := 0; i < cfg.Messages; i++ {
		ci := i % cfg.Conversations
		e := events.New(events.MessageSent, int64(ci+1), senders[ci])
		e.MsgID = uuid.NewString()
		e.Body = &body
		prod.AppendAsync(ctx, e, func(_ producer.Position, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
		if i%20000 == 0 && i > 0 {
			fmt.Fprintf(progress, "bench fanout: appended %d/%d\n", i, cfg.Messages)
		}
	}
	stopProgress := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				var done int64
				_ = pool.QueryRow(ctx, `SELECT coalesce(sum(next_offset),0) FROM consumer_offsets`).Scan(&done)
				total := int64(cfg.Messages + cfg.Conversations + 50)
				el := time.Since(start).Seconds()
				fmt.Fprintf(progress, "bench fanout: %d/%d records projected, %.0f records/s\n", done, total, float64(done-int64(cfg.Conversations)-50)/el)
			}
		}
	}()
	err = testenv.WaitCaughtUp(ctx, pool, prod, 30*time.Minute)
	close(stopProgress)
	if err != nil {
		return res, err
	}
	select {
	case err := <-errs:
		return res, fmt.Errorf("append: %w", err)
	default:
	}
	res.Seconds = time.Since(start).Seconds()
	var rowsAfter int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM inbox`).Scan(&rowsAfter); err != nil {
		return res, err
	}
	res.InboxRows = rowsAfter - rowsBefore
	res.RowsPerSec = float64(res.InboxRows) / res.Seconds
	res.LiveRecPerSec = float64(cfg.Messages) / res.Seconds
	rep, err := projector.Verify(ctx, pool)
	if err != nil {
		return res, err
	}
	res.VerifyOK = rep.OK()
	if !res.VerifyOK {
		rep.Print(progress)
	}

	// Replay of the whole log (fanout stopped), against the live rate.
	stopFanout()
	if !cfg.SkipReplay {
		rres, err := replay.Run(ctx, replay.Config{Brokers: pl.brokers, Logger: log, Progress: progress}, pool)
		if err != nil {
			return res, fmt.Errorf("replay: %w", err)
		}
		res.ReplayRecPerSec = rres.Rate()
		fmt.Fprintf(progress, "bench fanout: replay %v, of which %v applying\n", rres.Duration, rres.ApplyTime)
		res.ReplayRatio = res.ReplayRecPerSec / res.LiveRecPerSec
	}

	// Reference: COPY of as many inbox-shaped rows into an identical table.
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_inbox (LIKE inbox INCLUDING ALL)`); err != nil {
		return res, err
	}
	n := res.InboxRows
	now := time.Now()
	rows := make([][]any, 0, n)
	perUser := map[int64]int64{}
	for i := int64(0); i < n; i++ {
		u := 1 + i%users
		perUser[u]++
		rows = append(rows, []any{u, perUser[u], 1 + i%int64(cfg.Conversations), int16(1), i, int64(0), now})
	}
	cstart := time.Now()
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"bench_inbox"},
			[]string{"user_id", "inbox_seq", "conversation_id", "kind", "seq", "version", "created_at"}, pgx.CopyFromRows(rows))
		return err
	})
	if err != nil {
		return res, fmt.Errorf("copy reference: %w", err)
	}
	res.CopySeconds = time.Since(cstart).Seconds()
	res.CopyRows = n
	res.CopyRowsPerSec = float64(n) / res.CopySeconds
	res.Ratio = res.RowsPerSec / res.CopyRowsPerSec
	return res, nil
}

func idleLatency(ctx context.Context, pool *pgxpool.Pool, prod *producer.Producer, senders []int64, res *FanoutResult) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+projection.DefaultChannel); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE bench_commit_probe (id bigserial PRIMARY KEY, at timestamptz NOT NULL)`); err != nil {
		return err
	}
	var lat, commits []float64
	body := "ping"
	for i := 0; i < 50; i++ {
		e := events.New(events.MessageSent, 1, senders[0])
		e.MsgID = uuid.NewString()
		e.Body = &body
		t0 := time.Now()
		if _, err := prod.Append(ctx, e); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		for {
			n, err := conn.Conn().WaitForNotification(wctx)
			if err != nil {
				cancel()
				return fmt.Errorf("wait for notification: %w", err)
			}
			if _, ok := projection.ParseNotification(n.Payload).Heads[senders[0]]; ok {
				break
			}
		}
		cancel()
		d := time.Since(t0)
		lat = append(lat, float64(d.Microseconds())/1000)
		time.Sleep(5 * time.Millisecond)
		// The reference: one commit of one row, between two messages.
		t1 := time.Now()
		if _, err := conn.Exec(ctx, `INSERT INTO bench_commit_probe (at) VALUES (now())`); err != nil {
			return err
		}
		commits = append(commits, float64(time.Since(t1).Microseconds())/1000)
		time.Sleep(5 * time.Millisecond)
	}
	l, c := newDist(lat), newDist(commits)
	res.IdleP50Ms, res.IdleP99Ms = l.P50, l.P99
	res.IdleCommitP50Ms, res.IdleCommitP99Ms = c.P50, c.P99
	return nil
}

// batchSeconds reads the fanout batch histogram's sum and count.
func batchSeconds(reg *prometheus.Registry) (float64, uint64) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() == "inboxd_fanout_batch_seconds" && len(mf.GetMetric()) > 0 {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleSum(), h.GetSampleCount()
		}
	}
	return 0, 0
}
