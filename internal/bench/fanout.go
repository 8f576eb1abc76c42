// Package bench holds the measurements behind `inboxd bench`. Each figure is
// reported next to a reference measured in the same run, so that the ratio
// carries over to other machines.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/pgserver"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/migrations"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/projector"
	"github.com/inboxd/inboxd/replay"
)

// FanoutConfig configures Fanout.
type FanoutConfig struct {
	DatabaseURL    string // admin URL; empty starts a private server
	Messages       int
	Members        int
	Conversations  int
	Partitions     int
	MaxPollRecords int
	JSONOut        string
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
	VerifyOK        bool    `json:"verify_ok"`
	LiveRecPerSec   float64 `json:"live_records_per_sec"`
	ReplayRecPerSec float64 `json:"replay_records_per_sec"`
	ReplayRatio     float64 `json:"replay_ratio_to_live"`
}

// Print writes the result table.
func (r FanoutResult) Print(w io.Writer) {
	fmt.Fprintf(w, "\n| figure | value | reference (same run) | ratio |\n|---|---|---|---|\n")
	fmt.Fprintf(w, "| fan-out, committed inbox rows/s (%d members, %d messages) | %.0f | plain COPY of %d inbox rows: %.0f rows/s | %.3f |\n",
		r.Members, r.Messages, r.RowsPerSec, r.CopyRows, r.CopyRowsPerSec, r.Ratio)
	fmt.Fprintf(w, "| idle: append -> NOTIFY of the commit, p50 / p99 | %.1f / %.1f ms | fanout batch apply mean %.1f ms | |\n",
		r.IdleP50Ms, r.IdleP99Ms, r.IdleBatchMeanMs)
	fmt.Fprintf(w, "| replay (rebuild from offset 0), records/s | %.0f | live fan-out: %.0f records/s | %.2f |\n",
		r.ReplayRecPerSec, r.LiveRecPerSec, r.ReplayRatio)
	fmt.Fprintf(w, "\nverify after the run: %v\n", map[bool]string{true: "all invariants hold", false: "VIOLATED"}[r.VerifyOK])
}

// Fanout measures end-to-end committed inbox rows per second: messages
// appended through the producer to an in-process kfake, consumed by an
// in-process fanout into PostgreSQL, until the stored offsets reach the end
// of the log; then a plain COPY of the same number of inbox-shaped rows into
// an identically indexed table, on the same server.
func Fanout(ctx context.Context, cfg FanoutConfig, progress io.Writer) (FanoutResult, error) {
	res := FanoutResult{Messages: cfg.Messages, Members: cfg.Members}
	log := slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelWarn}))
	admin := cfg.DatabaseURL
	if admin == "" {
		dir, err := os.MkdirTemp("", "inboxd-bench-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
		s, err := pgserver.Start(ctx, pgserver.Config{Dir: filepath.Join(dir, "pg"), Logger: log})
		if err != nil {
			return res, err
		}
		defer s.Stop()
		admin = s.URL
	}
	dbName := fmt.Sprintf("inboxd_bench_%d", time.Now().UnixNano())
	ac, err := pgx.Connect(ctx, admin)
	if err != nil {
		return res, err
	}
	defer func() {
		_, _ = ac.Exec(context.Background(), "DROP DATABASE IF EXISTS "+dbName+" WITH (FORCE)")
		ac.Close(context.Background())
	}()
	if _, err := ac.Exec(ctx, "CREATE DATABASE "+dbName); err != nil {
		return res, err
	}
	pool, err := pgxpool.New(ctx, withDB(admin, dbName))
	if err != nil {
		return res, err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return res, err
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(cfg.Partitions))
	if err != nil {
		return res, err
	}
	defer cluster.Close()
	pcfg := producer.Config{Brokers: cluster.ListenAddrs(), CreateTopics: true, Partitions: int32(cfg.Partitions), Logger: log}
	prod, err := producer.New(pcfg)
	if err != nil {
		return res, err
	}
	defer prod.Close()
	if err := prod.EnsureTopics(ctx); err != nil {
		return res, err
	}
	reg := prometheus.NewRegistry()
	fo, err := fanout.New(fanout.Config{Brokers: cluster.ListenAddrs(), MaxPollRecords: cfg.MaxPollRecords, Logger: log, Registerer: reg}, pool)
	if err != nil {
		return res, err
	}
	fctx, stopFanout := context.WithCancel(ctx)
	fdone := make(chan error, 1)
	go func() { fdone <- fo.Run(fctx) }()
	defer func() { stopFanout(); <-fdone }()

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
	<-fdone
	fdone <- nil
	rres, err := replay.Run(ctx, replay.Config{Brokers: cluster.ListenAddrs(), Logger: log, Progress: progress}, pool)
	if err != nil {
		return res, fmt.Errorf("replay: %w", err)
	}
	res.ReplayRecPerSec = rres.Rate()
	fmt.Fprintf(progress, "bench fanout: replay %v, of which %v applying\n", rres.Duration, rres.ApplyTime)
	res.ReplayRatio = res.ReplayRecPerSec / res.LiveRecPerSec

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
	if cfg.JSONOut != "" {
		raw, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(cfg.JSONOut, raw, 0o644); err != nil {
			return res, err
		}
	}
	return res, nil
}

func idleLatency(ctx context.Context, pool *pgxpool.Pool, prod *producer.Producer, senders []int64, res *FanoutResult) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+projector.DefaultChannel); err != nil {
		return err
	}
	var lat []float64
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
			if _, ok := projector.ParseNotification(n.Payload).Heads[senders[0]]; ok {
				break
			}
		}
		cancel()
		d := time.Since(t0)
		lat = append(lat, float64(d.Microseconds())/1000)
		time.Sleep(10 * time.Millisecond)
	}
	sort.Float64s(lat)
	res.IdleP50Ms = lat[len(lat)/2]
	res.IdleP99Ms = lat[len(lat)*99/100]
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

func withDB(u, db string) string {
	i := strings.LastIndex(u, "/")
	q := ""
	if j := strings.Index(u[i:], "?"); j >= 0 {
		q = u[i+j:]
	}
	return u[:i+1] + db + q
}
