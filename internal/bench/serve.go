package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/producer"
)

// serveConfig configures the server under test (`inboxd-bench serve`).
type serveConfig struct {
	// Mode "gateway": the inboxd gateway with its WebSocket endpoint at
	// GET /v1/ws and, on the same http.Server, GET /bench/trivial.
	// Mode "echo": a bare gorilla/websocket echo server at GET /v1/ws,
	// the reference of the bytes per idle connection.
	Mode        string
	Addr        string // default 127.0.0.1:0
	DatabaseURL string
	Brokers     []string
	Partitions  int
	Secret      string
	MaxConns    int // WebSocket connections of the gateway; default 16384
	DBMaxConns  int // 0: gateway.DBMaxConns, as `inboxd gateway`
	// SendCheckBatch, SendCheckRunners: gateway.Config's (0: its defaults).
	SendCheckBatch, SendCheckRunners int
	// LargePushRate is the WebSocket pacing of read-mode pushes (0: the
	// gateway's default; negative: none).
	LargePushRate float64
	Deadline      time.Duration
	// Hints turns the gateway's reconnect hints and start-up admission on
	// (gateway.ReconnectConfig), with RestartDelay and AdmitRate (0: the
	// default); off, as for every figure but the storm's hinted runs, the
	// gateway behaves as before hints.
	Hints        bool
	RestartDelay time.Duration
	AdmitRate    float64
	// S3: the attachments' store of the gateway (empty Endpoint: none).
	S3 attachments.S3Config
	// ThumbnailInterval is how often the gateway's thumbnail worker looks
	// for wanted thumbnails (0: the gateway's default; `inboxd gateway`
	// has no flag for it).
	ThumbnailInterval time.Duration
	// SyncRate and SyncBurst are the gateway's per-user bucket of reads
	// (0: its defaults). The search figure asks as one user, back to back,
	// faster than a person would.
	SyncRate  float64
	SyncBurst int
}

// serveReady is the child's "ready" line.
type serveReady struct {
	Addr string `json:"addr"`
	Ctl  string `json:"ctl"` // pprof and /ctl/mem
	Pid  int    `json:"pid"`
}

// memReading is GET /ctl/mem: the process after a GC and a return of
// free memory to the OS, so that RSS tracks what is live.
type memReading struct {
	RSS        int64  `json:"rss"`
	HeapInuse  uint64 `json:"heap_inuse"`
	StackInuse uint64 `json:"stack_inuse"`
	Sys        uint64 `json:"sys"`
	Goroutines int    `json:"goroutines"`
	Sessions   int    `json:"sessions"`
}

func runServe(ctx context.Context, cio *childIO, raw []byte) error {
	var cfg serveConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("serve config: %w", err)
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if err := loopbackOnly(cfg.Addr); err != nil {
		return err
	}
	ctx, cancel := withDeadline(ctx, cfg.Deadline)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	ctlLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var sessions func() int
	var gatherer prometheus.Gatherer // the gateway's metrics, for /ctl/hist
	mux := http.NewServeMux()
	eg, ectx := errgroup.WithContext(ctx)
	var drain func()

	switch cfg.Mode {
	case "echo":
		var n atomic.Int64
		up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
		mux.HandleFunc("GET /v1/ws", func(w http.ResponseWriter, r *http.Request) {
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			n.Add(1)
			defer n.Add(-1)
			defer c.Close()
			for {
				mt, msg, err := c.ReadMessage()
				if err != nil {
					return
				}
				if err := c.WriteMessage(mt, msg); err != nil {
					return
				}
			}
		})
		sessions = func() int { return int(n.Load()) }
		drain = func() {}
	case "gateway":
		pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
		if err != nil {
			return err
		}
		pcfg.MaxConns = int32(gateway.DBMaxConns()) // as inboxd gateway
		if cfg.DBMaxConns > 0 {
			pcfg.MaxConns = int32(cfg.DBMaxConns)
		}
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		prod, err := producer.New(producer.Config{Brokers: cfg.Brokers, CreateTopics: true,
			Partitions: int32(cfg.Partitions), Logger: log})
		if err != nil {
			return err
		}
		defer prod.Close()
		if err := prod.EnsureTopics(ctx); err != nil {
			return err
		}
		reg := prometheus.NewRegistry()
		gatherer = reg
		ac := gateway.AttachmentsConfig{ThumbnailInterval: cfg.ThumbnailInterval}
		if cfg.S3.Endpoint != "" {
			st, err := attachments.NewS3(ctx, cfg.S3)
			if err != nil {
				return err
			}
			ac.Store = st
		}
		g, err := gateway.New(gateway.Config{Addr: cfg.Addr, AuthSecret: []byte(cfg.Secret), Logger: log,
			SendCheckBatch: cfg.SendCheckBatch, SendCheckRunners: cfg.SendCheckRunners, Attachments: ac,
			SyncRate: rate.Limit(cfg.SyncRate), SyncBurst: cfg.SyncBurst,
			Registerer: reg, Reconnect: gateway.ReconnectConfig{Disabled: !cfg.Hints,
				RestartDelay: cfg.RestartDelay, AdmitRate: cfg.AdmitRate}}, pool, prod)
		if err != nil {
			return err
		}
		ws, err := g.NewWebSocket(gateway.WSConfig{MaxConns: cfg.MaxConns, LargePushRate: cfg.LargePushRate})
		if err != nil {
			return err
		}
		mux.Handle("GET /v1/ws", ws)
		mux.Handle("GET /bench/trivial", trivialHandler([]byte(cfg.Secret)))
		mux.Handle("/", g.Handler())
		sessions = ws.Sessions
		drain = g.Drain
		eg.Go(func() error { return g.Listen(ectx) })
		eg.Go(func() error { return ws.Run(ectx) })
	default:
		return fmt.Errorf("serve: unknown mode %q", cfg.Mode)
	}

	// The settings of gateway.Serve, so that the handlers run on the same
	// HTTP stack as in `inboxd gateway`.
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ctl := &http.Server{Handler: ctlMux(sessions, gatherer)}
	eg.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	eg.Go(func() error {
		if err := ctl.Serve(ctlLn); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	eg.Go(func() error {
		<-ectx.Done()
		drain()
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		_ = srv.Shutdown(sctx)
		_ = ctl.Close()
		return nil
	})
	if cfg.Mode == "gateway" {
		if err := waitWebSocketUp(ctx, ln.Addr().String()); err != nil {
			cancel()
			_ = eg.Wait()
			return err
		}
	}
	cio.emit("ready", serveReady{Addr: ln.Addr().String(), Ctl: ctlLn.Addr().String(), Pid: os.Getpid()})
	err = eg.Wait()
	if ctx.Err() != nil {
		return nil // stopped: SIGTERM or the deadline
	}
	return err
}

// waitWebSocketUp waits until GET /v1/ws upgrades (the endpoint refuses
// with 503 until its Run runs); the probe has no token and is closed 4001.
func waitWebSocketUp(ctx context.Context, addr string) error {
	d := websocket.Dialer{HandshakeTimeout: 2 * time.Second}
	for i := 0; i < 200; i++ {
		c, _, err := d.DialContext(ctx, "ws://"+addr+"/v1/ws", nil)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return errors.New("serve: the WebSocket endpoint did not come up")
}

func ctlMux(sessions func() int, gatherer prometheus.Gatherer) *http.ServeMux {
	mux := http.NewServeMux()
	// GET /ctl/hist?name=M: the histogram M by its one label (stageHists).
	mux.HandleFunc("GET /ctl/hist", func(w http.ResponseWriter, r *http.Request) {
		var h map[string]histSnap
		if gatherer != nil {
			h = gatherHists(gatherer, r.URL.Query().Get("name"))
		}
		_ = json.NewEncoder(w).Encode(h)
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /ctl/mem", func(w http.ResponseWriter, _ *http.Request) {
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		rss, _ := rssBytes(os.Getpid())
		_ = json.NewEncoder(w).Encode(memReading{RSS: rss, HeapInuse: ms.HeapInuse, StackInuse: ms.StackInuse,
			Sys: ms.Sys, Goroutines: runtime.NumGoroutine(), Sessions: sessions()})
	})
	return mux
}

// trivialHandler is the reference of the sync figures: it authenticates
// the bearer token exactly as the gateway does (HS256, exp required, sub a
// user id) and answers a small JSON object, without touching PostgreSQL.
func trivialHandler(secret []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			http.Error(w, `{"error":{"code":"unauthorized"}}`, http.StatusUnauthorized)
			return
		}
		var claims jwt.RegisteredClaims
		_, err := jwt.ParseWithClaims(strings.TrimSpace(tok), &claims, func(*jwt.Token) (any, error) { return secret, nil },
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithExpirationRequired())
		u, perr := strconv.ParseInt(claims.Subject, 10, 64)
		if err != nil || perr != nil || u <= 0 {
			http.Error(w, `{"error":{"code":"unauthorized"}}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"user_id":` + claims.Subject + `}`))
	})
}

// ctlGet fetches a control URL of a serve child into v.
func ctlGet(ctx context.Context, ctl, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+ctl+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// startServe starts a serve child and waits for its ready line.
func startServe(ctx context.Context, e *Env, name string, cfg serveConfig) (*child, serveReady, error) {
	if cfg.Deadline == 0 {
		cfg.Deadline = 30 * time.Minute
	}
	c, err := e.Runner.start(e.Progress, name, []string{"serve"}, cfg)
	if err != nil {
		return nil, serveReady{}, err
	}
	var r serveReady
	if err := c.expectJSON(ctx, "ready", 60*time.Second, &r); err != nil {
		c.kill()
		return nil, r, err
	}
	return c, r, nil
}
