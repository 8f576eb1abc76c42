package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// IdleConfig configures Idle. Zero fields take the defaults in brackets.
type IdleConfig struct {
	Conns   int     // [15000] connections to hold
	Workers int     // [3] load generator processes (at least 2)
	IPs     int     // [2] source addresses per worker
	Settle  float64 // [3] seconds between the last connection and the reading
}

func (c *IdleConfig) setDefaults() {
	if c.Conns == 0 {
		c.Conns = 15000
	}
	if c.Workers == 0 {
		c.Workers = 3
	}
	if c.IPs == 0 {
		c.IPs = 2
	}
	if c.Settle == 0 {
		c.Settle = 3
	}
}

// IdleSide is one server's idle connections and what they cost it.
type IdleSide struct {
	Server         string     `json:"server"`
	Target         int        `json:"target"`
	Held           int        `json:"held"`
	Failed         int        `json:"failed"`
	FirstErr       string     `json:"first_error,omitempty"`
	ConnectSeconds float64    `json:"connect_seconds"`
	Before         memReading `json:"before"`
	After          memReading `json:"after"`
	RSSPerConn     float64    `json:"rss_bytes_per_conn"`
	HeapPerConn    float64    `json:"heap_bytes_per_conn"`
	StackPerConn   float64    `json:"stack_bytes_per_conn"`
	GoroutinesPer  float64    `json:"goroutines_per_conn"`
	Profile        *Profile   `json:"heap_profile,omitempty"`
}

// IdleResult is the outcome of Idle.
type IdleResult struct {
	Workers int      `json:"workers"`
	SrcIPs  int      `json:"source_addresses"`
	Gateway IdleSide `json:"gateway"`
	Echo    IdleSide `json:"echo"`
}

// Rows implements Result.
func (r IdleResult) Rows() []Row {
	g, e := r.Gateway, r.Echo
	return []Row{{
		Figure: fmt.Sprintf("idle WebSockets held by one gateway process (hello answered; from %d processes, %d source addresses)", r.Workers, r.SrcIPs),
		Value:  fmt.Sprintf("%s of %s", num(float64(g.Held)), num(float64(g.Target))),
		Reference: fmt.Sprintf("bare gorilla/websocket echo server, same clients: %s of %s",
			num(float64(e.Held)), num(float64(e.Target))),
		Ratio: ratio(float64(g.Held), float64(e.Held)),
	}, {
		Figure:    "gateway RSS per idle WebSocket",
		Value:     bytesPer(g.RSSPerConn),
		Reference: "echo server: " + bytesPer(e.RSSPerConn),
		Ratio:     ratio(g.RSSPerConn, e.RSSPerConn),
	}, {
		Figure:    "gateway Go heap + goroutine stacks per idle WebSocket",
		Value:     fmt.Sprintf("%s + %s", bytesPer(g.HeapPerConn), bytesPer(g.StackPerConn)),
		Reference: fmt.Sprintf("echo server: %s + %s", bytesPer(e.HeapPerConn), bytesPer(e.StackPerConn)),
		Ratio:     ratio(g.HeapPerConn+g.StackPerConn, e.HeapPerConn+e.StackPerConn),
	}, {
		Figure:    "goroutines per idle WebSocket",
		Value:     fmt.Sprintf("%.2f", g.GoroutinesPer),
		Reference: fmt.Sprintf("echo server: %.2f", e.GoroutinesPer),
		Ratio:     ratio(g.GoroutinesPer, e.GoroutinesPer),
	}, {
		Figure:    "time to open the idle WebSockets (hello answered)",
		Value:     fmt.Sprintf("%.1f s", g.ConnectSeconds),
		Reference: fmt.Sprintf("echo server: %.1f s", e.ConnectSeconds),
		Ratio:     ratio(g.ConnectSeconds, e.ConnectSeconds),
	}}
}

// Idle holds cfg.Conns idle WebSockets on one gateway process, then on a
// bare gorilla/websocket echo server, and reports what a connection costs
// each: the growth of RSS and of the Go heap and stacks (after a GC and a
// return of free memory to the OS) divided by the connections held. The
// connections come from cfg.Workers processes over several 127.0.0.x
// source addresses.
func Idle(ctx context.Context, env *Env, cfg IdleConfig) (IdleResult, error) {
	cfg.setDefaults()
	res := IdleResult{Workers: cfg.Workers, SrcIPs: cfg.Workers * cfg.IPs}
	url, drop, err := env.newDatabase(ctx, "idle")
	if err != nil {
		return res, err
	}
	defer drop()
	cluster, err := newKafka(4)
	if err != nil {
		return res, err
	}
	defer cluster.Close()
	secret := randomSecret()
	// Different source addresses for the two servers: the first one's
	// closed connections linger in TIME_WAIT.
	res.Gateway, err = idleSide(ctx, env, cfg, serveConfig{Mode: "gateway", DatabaseURL: url,
		Brokers: cluster.ListenAddrs(), Partitions: 4, Secret: secret, MaxConns: cfg.Conns + 1000}, 10)
	if err != nil {
		return res, err
	}
	res.Echo, err = idleSide(ctx, env, cfg, serveConfig{Mode: "echo"}, 10+cfg.Workers*cfg.IPs)
	return res, err
}

func idleSide(ctx context.Context, env *Env, cfg IdleConfig, scfg serveConfig, firstIP int) (IdleSide, error) {
	side := IdleSide{Server: scfg.Mode, Target: cfg.Conns}
	pr := env.Progress
	srv, ready, err := startServe(ctx, env, scfg.Mode, scfg)
	if err != nil {
		return side, err
	}
	defer srv.kill()
	if err := ctlGet(ctx, ready.Ctl, "/ctl/mem", &side.Before); err != nil {
		return side, err
	}
	var ws children
	defer func() { ws.killAll() }()
	per := (cfg.Conns + cfg.Workers - 1) / cfg.Workers
	start := time.Now()
	for i := 0; i < cfg.Workers; i++ {
		n := min(per, cfg.Conns-i*per)
		if n <= 0 {
			break
		}
		secret := ""
		if scfg.Mode == "gateway" {
			secret = scfg.Secret
		}
		w, err := env.Runner.start(pr, fmt.Sprintf("idle-%s-%d", scfg.Mode, i+1), []string{"worker", "idle"}, idleWorkerConfig{
			Addr: ready.Addr, Secret: secret, FirstUser: int64(1 + i*per), Count: n,
			SrcIPs: sourceIPs(firstIP+i*cfg.IPs, cfg.IPs), Deadline: 10 * time.Minute})
		if err != nil {
			return side, err
		}
		ws = append(ws, w)
	}
	progressf(pr, "bench idle: %s: opening %s WebSockets from %d processes ...", scfg.Mode, num(float64(cfg.Conns)), len(ws))
	for _, w := range ws {
		var r idleReady
		if err := w.expectJSON(ctx, "ready", 5*time.Minute, &r); err != nil {
			return side, err
		}
		side.Held += r.Connected
		side.Failed += r.Failed
		if side.FirstErr == "" {
			side.FirstErr = r.FirstErr
		}
	}
	side.ConnectSeconds = time.Since(start).Seconds()
	progressf(pr, "bench idle: %s: %d held, %d failed (%s) in %.1fs; settling", scfg.Mode, side.Held, side.Failed, side.FirstErr, side.ConnectSeconds)
	sleepCtx(ctx, time.Duration(cfg.Settle*float64(time.Second)))
	if err := ctlGet(ctx, ready.Ctl, "/ctl/mem", &side.After); err != nil {
		return side, err
	}
	if side.After.Sessions > 0 {
		side.Held = min(side.Held, side.After.Sessions)
	}
	n := float64(side.Held)
	side.RSSPerConn = div(float64(side.After.RSS-side.Before.RSS), n)
	side.HeapPerConn = div(float64(side.After.HeapInuse)-float64(side.Before.HeapInuse), n)
	side.StackPerConn = div(float64(side.After.StackInuse)-float64(side.Before.StackInuse), n)
	side.GoroutinesPer = div(float64(side.After.Goroutines-side.Before.Goroutines), n)
	if scfg.Mode == "gateway" {
		path := filepath.Join(env.OutDir, "idle-gateway-heap.pprof")
		if err := heapProfile(ctx, ready.Ctl, path); err != nil {
			progressf(pr, "bench idle: heap profile: %v", err)
		} else {
			side.Profile = &Profile{Name: fmt.Sprintf("gateway heap holding %s idle WebSockets", num(float64(side.Held))), Path: path, Heap: true,
				Top: pprofTop(ctx, path, 20, "-sample_index=inuse_space")}
		}
	}
	progressf(pr, "bench idle: %s: RSS %s/conn, heap %s/conn, stacks %s/conn, %.2f goroutines/conn",
		scfg.Mode, bytesPer(side.RSSPerConn), bytesPer(side.HeapPerConn), bytesPer(side.StackPerConn), side.GoroutinesPer)
	for _, w := range ws {
		_ = w.send("stop")
	}
	for _, w := range ws {
		_ = w.stop(30 * time.Second)
	}
	_ = srv.stop(20 * time.Second)
	return side, nil
}
