package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SyncConfig configures Sync. Zero fields take the defaults in brackets.
type SyncConfig struct {
	// Users [4000], each in Members [7] conversations of Members members,
	// each conversation with Messages [35] text messages: 259 inbox
	// entries per user, 1,036,000 inbox rows.
	Users    int
	Members  int
	Messages int
	Page     int     // [50] entries per page
	Conns    int     // [64] keep-alive connections of the load generator
	Seconds  float64 // [8] per kind of request
	// Profile takes a CPU profile of the gateway during the pages.
	Profile bool
}

func (c *SyncConfig) setDefaults() {
	setDefault(&c.Users, 4000)
	setDefault(&c.Members, 7)
	setDefault(&c.Messages, 35)
	setDefault(&c.Page, 50)
	setDefault(&c.Conns, 64)
	if c.Seconds == 0 {
		c.Seconds = 8
	}
}

// SyncResult is the outcome of Sync.
type SyncResult struct {
	Data            syncData   `json:"data"`
	GenerateSeconds float64    `json:"generate_seconds"`
	GenerateRowsSec float64    `json:"generate_inbox_rows_per_sec"`
	Conns           int        `json:"connections"`
	PageSize        int        `json:"page_size"`
	Page            SyncPhase  `json:"page"`
	NotModified     SyncPhase  `json:"not_modified"`
	Trivial         SyncPhase  `json:"trivial"`
	CPU             []CPUShare `json:"cpu_during_pages"`
	Profiles        []Profile  `json:"profiles"`
}

// Rows implements Result.
func (r SyncResult) Rows() []Row {
	t := r.Trivial
	ref := fmt.Sprintf("trivial handler, same server and JWT check: %s req/s", num(t.PerSec))
	rows := []Row{{
		Figure: fmt.Sprintf("sync pages/s (%d entries with messages inline, inbox table of %s rows, %d keep-alive connections)",
			r.PageSize, num(float64(r.Data.Rows)), r.Conns),
		Value: num(r.Page.PerSec), Reference: ref, Ratio: ratio(r.Page.PerSec, t.PerSec),
	}, {
		Figure: "sync 304 Not Modified/s (cursor at the head, matching ETag)",
		Value:  num(r.NotModified.PerSec), Reference: ref, Ratio: ratio(r.NotModified.PerSec, t.PerSec),
	}, {
		Figure:    "sync page latency under that load, p50 / p99",
		Value:     fmt.Sprintf("%s / %s", ms(r.Page.Latency.P50), ms(r.Page.Latency.P99)),
		Reference: fmt.Sprintf("trivial handler: %s / %s", ms(t.Latency.P50), ms(t.Latency.P99)),
		Ratio:     fmt.Sprintf("p50 %s, p99 %s", ratio(r.Page.Latency.P50, t.Latency.P50), ratio(r.Page.Latency.P99, t.Latency.P99)),
	}, {
		Figure:    "sync 304 latency under that load, p50 / p99",
		Value:     fmt.Sprintf("%s / %s", ms(r.NotModified.Latency.P50), ms(r.NotModified.Latency.P99)),
		Reference: fmt.Sprintf("trivial handler: %s / %s", ms(t.Latency.P50), ms(t.Latency.P99)),
		Ratio:     fmt.Sprintf("p50 %s, p99 %s", ratio(r.NotModified.Latency.P50, t.Latency.P50), ratio(r.NotModified.Latency.P99, t.Latency.P99)),
	}}
	var total float64
	for _, c := range r.CPU {
		total += c.Cores
	}
	for _, c := range r.CPU {
		rows = append(rows, Row{
			Figure:    "CPU during the sync pages: " + c.Group,
			Value:     fmt.Sprintf("%.2f cores", c.Cores),
			Reference: fmt.Sprintf("all measured processes: %.2f cores", total),
			Ratio:     ratio(c.Cores, total),
		})
	}
	return rows
}

// Sync measures GET /v1/sync over a large inbox table: random pages of 50
// entries (messages inline), and the 304 answer of a client at its head,
// against a trivial handler on the same http.Server that checks the same
// bearer token. The data is generated with COPY; the gateway runs as a
// child, the load generator as another with many keep-alive connections.
func Sync(ctx context.Context, env *Env, cfg SyncConfig) (SyncResult, error) {
	cfg.setDefaults()
	res := SyncResult{Conns: cfg.Conns, PageSize: cfg.Page}
	pr := env.Progress
	url, drop, err := env.newDatabase(ctx, "sync")
	if err != nil {
		return res, err
	}
	defer drop()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	t0 := time.Now()
	data, err := generateSyncData(ctx, pool, cfg.Users, cfg.Members, cfg.Messages, pr)
	if err != nil {
		return res, fmt.Errorf("generate the inbox: %w", err)
	}
	res.Data = data
	res.GenerateSeconds = time.Since(t0).Seconds()
	res.GenerateRowsSec = float64(data.Rows) / res.GenerateSeconds
	progressf(pr, "bench sync: %s inbox rows of %d users generated in %.1fs", num(float64(data.Rows)), data.Users, res.GenerateSeconds)
	pool.Close()

	cluster, err := newKafka(4)
	if err != nil {
		return res, err
	}
	defer cluster.Close()
	secret := randomSecret()
	gw, ready, err := startServe(ctx, env, "gateway", serveConfig{Mode: "gateway", DatabaseURL: url,
		Brokers: cluster.ListenAddrs(), Partitions: 4, Secret: secret})
	if err != nil {
		return res, err
	}
	defer gw.kill()
	wk, err := env.Runner.start(pr, "sync-load", []string{"worker", "sync"}, syncWorkerConfig{
		Addr: ready.Addr, Secret: secret, Users: data.Users, Head: data.Head, Epoch: data.Epoch, Page: cfg.Page,
		Conns: cfg.Conns, SrcIPs: sourceIPs(2, 4), Deadline: 10 * time.Minute})
	if err != nil {
		return res, err
	}
	defer wk.kill()
	if _, err := wk.expect(ctx, "ready", time.Minute); err != nil {
		return res, err
	}
	groups := map[string]func() []int{
		cpuGroupGateway:       func() []int { return []int{ready.Pid} },
		cpuGroupLoadGenerator: func() []int { return []int{wk.pid()} },
	}
	if env.PGData != "" {
		groups["PostgreSQL (all its processes)"] = env.postgresPids
	}
	run := func(mode string, secs float64) (SyncPhase, error) {
		progressf(pr, "bench sync: %s requests for %gs over %d connections ...", mode, secs, cfg.Conns)
		cmd, _ := json.Marshal(syncPhaseCmd{Mode: mode, Seconds: secs})
		if err := wk.send("phase " + string(cmd)); err != nil {
			return SyncPhase{}, err
		}
		var p SyncPhase
		if err := wk.expectJSON(ctx, "result", time.Duration(secs+120)*time.Second, &p); err != nil {
			return p, err
		}
		progressf(pr, "bench sync: %s: %s req/s, p50 %s p99 %s, %d errors %v, %d bad of %d checked pages",
			mode, num(p.PerSec), ms(p.Latency.P50), ms(p.Latency.P99), p.Errors, p.Statuses, p.BadPages, p.Checked)
		if p.Requests == 0 {
			return p, fmt.Errorf("sync %s: no request succeeded (%s)", mode, p.FirstErr)
		}
		return p, nil
	}
	// A short warm-up of the pages: connections, the pool, the caches.
	if _, err := run("page", min(2, cfg.Seconds)); err != nil {
		return res, err
	}
	if res.Trivial, err = run("trivial", cfg.Seconds); err != nil {
		return res, err
	}
	meter := newCPUMeter(groups)
	var prof <-chan error
	if cfg.Profile {
		secs := max(1, int(cfg.Seconds)-1)
		path := filepath.Join(env.OutDir, "sync-gateway.pprof")
		prof = profileGateway(ctx, ready.Ctl, secs, path)
		res.Profiles = append(res.Profiles, Profile{Name: "gateway during sync pages", Path: path, Seconds: float64(secs)})
	}
	if res.Page, err = run("page", cfg.Seconds); err != nil {
		return res, err
	}
	res.CPU = meter.stop()
	if prof != nil {
		if err := <-prof; err != nil {
			progressf(pr, "bench sync: profile: %v", err)
		}
	}
	if res.NotModified, err = run("304", cfg.Seconds); err != nil {
		return res, err
	}
	_ = wk.send("quit")
	_ = wk.stop(10 * time.Second)
	_ = gw.stop(20 * time.Second)
	for i := range res.Profiles {
		res.Profiles[i].Top = pprofTop(ctx, res.Profiles[i].Path, 25)
		res.Profiles[i].TopCum = pprofTop(ctx, res.Profiles[i].Path, 30, "-cum")
	}
	return res, nil
}
