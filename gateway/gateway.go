package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/gateway/ephemeral"
	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/ratelimit"
	"github.com/inboxd/inboxd/gateway/internal/servers"
	"github.com/inboxd/inboxd/gateway/write"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/producer"
)

// Gateway serves the HTTP API. Create it with New; serve Handler with Run
// (or Serve, or any http.Server) while Listen runs the notification hub.
// It is the composition root of its packages: hub, inbox and ws, which it
// wires together; none of them refers back to it. It is safe for
// concurrent use.
type Gateway struct {
	id      string // this process's, on the channel of the rate limits (rateshare.go)
	cfg     Config
	pool    *pgxpool.Pool    // the catalog: server 1
	srv     *servers.Servers // the servers of the placement (pool alone on one)
	prod    *producer.Producer
	log     *slog.Logger
	metrics *metrics
	hub     *hub.Hub      // the LISTEN connection, subscriptions, head cache
	inbox   *inbox.Reader // the inbox reads, shared by sync and the pushes
	auth    *authenticator
	// The write path (package write), shared by HTTP, the WebSocket and
	// the server API: sends, changes of messages, and the writes of
	// conversations, memberships and records.
	sends   *write.Sender
	changes *write.Changer
	members *write.Members
	reports *write.Reporter
	// blocks is the blocks of the users this gateway serves (blocks.go).
	blocks  *blockCache
	handler http.Handler
	routes  []route

	promHandler http.Handler

	sendLimits *ratelimit.Limiters
	syncLimits *ratelimit.Limiters
	// serverLimits is the server API's buckets, one per API key.
	serverLimits *ratelimit.Limiters

	ws   *WebSocket         // GET /v1/ws, run by Listen
	eph  *ephemeral.Service // typing and presence, run by Listen
	held atomic.Int64       // long-polls currently held
	// reconnects is the admission and the reconnect hints; nil when
	// Config.Reconnect.Disabled.
	reconnects *reconnects
	draining   chan struct{} // closed by Drain
	drainOnce  sync.Once

	// beforeConnect, when set (tests), runs before each attempt to open
	// the LISTEN connection.
	beforeConnect func(ctx context.Context)
}

// Placement is a deployment on several PostgreSQL servers as the gateway
// reads it (docs/scaling.md): a pool per server of Map.Servers, in the
// same order (Pools[0] is server 1, the catalog), and the partition count
// of the event topic, which places users and conversations.
type Placement struct {
	Pools      []*pgxpool.Pool
	Map        *placement.Map
	Partitions int32
	// Version is the catalog's placement version this was read at, which
	// the gateway reports with its presence heartbeat (a move cleans a
	// partition's old server once no gateway reads an older one); 0: not
	// reported.
	Version int64
}

// servers is the routing of p's statements.
func (p Placement) servers() (*servers.Servers, error) {
	if len(p.Pools) == 0 || p.Map == nil || len(p.Map.Servers) != len(p.Pools) {
		return nil, errors.New("gateway: a placement needs a pool for each of its servers")
	}
	if p.Partitions <= 0 {
		return nil, errors.New("gateway: a placement needs the topic's partition count")
	}
	index := map[int32]int{}
	for i, s := range p.Map.Servers {
		if p.Pools[i] == nil {
			return nil, fmt.Errorf("gateway: no pool for server %d", s.ID)
		}
		index[s.ID] = i
	}
	for part := range p.Partitions {
		if _, ok := index[p.Map.Server(part)]; !ok {
			return nil, fmt.Errorf("gateway: partition %d is on server %d, which the placement does not list", part, p.Map.Server(part))
		}
	}
	if len(p.Pools) == 1 {
		return servers.One(p.Pools[0]), nil
	}
	// A moving partition is still read on its source until the switch.
	m, n := p.Map, p.Partitions
	return &servers.Servers{Pools: p.Pools,
		OfUser: func(user int64) int { return index[m.Server(placement.OfUser(user, n))] },
		OfConv: func(conv int64) int { return index[m.Server(placement.OfConversation(conv, n))] }}, nil
}

// New builds a gateway reading projections through pool and appending
// through prod. It does not connect; Listen and the requests do.
func New(cfg Config, pool *pgxpool.Pool, prod *producer.Producer) (*Gateway, error) {
	if pool == nil {
		return nil, errors.New("gateway: a pool and a producer are required")
	}
	return NewOn(cfg, Placement{Pools: []*pgxpool.Pool{pool}, Map: placement.Single(), Partitions: 1}, prod)
}

// NewOn is New on the servers of a placement: each user's inbox is read
// on its server and each conversation's messages on theirs, the hub
// listens to every server, and the writes are checked where their state
// is. With one server it is New.
func NewOn(cfg Config, pl Placement, prod *producer.Producer) (*Gateway, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if prod == nil {
		return nil, errors.New("gateway: a pool and a producer are required")
	}
	srv, err := pl.servers()
	if err != nil {
		return nil, err
	}
	pool := srv.Catalog()
	g := &Gateway{
		cfg:        cfg,
		pool:       pool,
		srv:        srv,
		prod:       prod,
		log:        cfg.Logger,
		sendLimits: ratelimit.New(cfg.SendRate, cfg.SendBurst),
		syncLimits: ratelimit.New(cfg.SyncRate, cfg.SyncBurst),
		draining:   make(chan struct{}),
		id:         newGatewayID(),
	}
	if cfg.RateShareInterval >= 0 {
		g.sendLimits.ShareSpending()
	}
	m, err := newMetrics(cfg.Registerer,
		func() float64 { return float64(g.held.Load()) },
		func() float64 {
			if g.hub.Connected() {
				return 1
			}
			return 0
		})
	if err != nil {
		return nil, fmt.Errorf("gateway: register metrics: %w", err)
	}
	g.metrics = m
	g.serverLimits = newServerLimits(cfg.ServerAPI)
	if g.reconnects, err = newReconnects(cfg.Reconnect, cfg.Registerer); err != nil {
		return nil, fmt.Errorf("gateway: reconnect hints: %w", err)
	}
	g.blocks = newBlockCache(srv)
	ecfg := cfg.Ephemeral
	ecfg.PlacementVersion = pl.Version
	ecfg.Blocks = g.blocks
	if g.eph, err = ephemeral.NewOn(ecfg, srv, g.sendLimits); err != nil {
		return nil, err
	}
	// The hub tells the reader (made next) of changed messages and of
	// notifications it may have missed, so that cached messages never
	// outlive a change.
	g.hub = hub.New(hub.Config{Servers: len(srv.Pools), OfUser: srv.OfUser,
		WakeJitter: cfg.WakeJitter, WakeBurst: cfg.WakeBurst, HeadCacheUsers: cfg.HeadCacheUsers,
		Notifications: m.notifications, Reconnects: m.listenerReconnects, Logger: cfg.Logger,
		Updated:  func(conv, seq, version int64) { g.inbox.Forget(conv, seq, version) },
		Lost:     func() { g.inbox.ForgetAll() },
		Read:     g.eph.Receipt,
		Channels: map[string]func(string){g.eph.Channel(): g.eph.Handle, rateChannel: g.heardSpending}})
	dbs := make([]inbox.Querier, len(srv.Pools))
	for i, p := range srv.Pools {
		dbs[i] = p
	}
	g.inbox = inbox.NewSharded(inbox.Servers{DBs: dbs, OfUser: srv.OfUser, OfConversation: srv.OfConv}, inbox.Config{MessageCacheBytes: cfg.MessageCacheBytes, TooLongLag: cfg.TooLongLag,
		CountsCacheUsers: cfg.CountsCacheUsers, Heads: g.hub.UserHeads(), CacheHit: m.cache.WithLabelValues("messages", "hit").Inc,
		HeldBack:  func(n int) { m.cache.WithLabelValues("messages", "held_back").Add(float64(n)) },
		CacheMiss: m.cache.WithLabelValues("messages", "miss").Inc})
	if g.auth, err = g.newAuthenticator(); err != nil {
		return nil, err
	}
	app := write.NewAppender(prod, cfg.AppendTimeout)
	g.sends = write.NewSender(write.SenderConfig{Servers: g.srv, Hub: g.hub, Inbox: g.inbox, App: app,
		Outcomes: m.sends, Stages: m.sendStages, MaxBody: cfg.MaxBody, AckWait: cfg.AckWait, Draining: g.draining,
		Seal: !cfg.PlainBodies, MentionAllMax: cfg.MentionAllMax, CheckBatch: cfg.SendCheckBatch, CheckRunners: cfg.SendCheckRunners,
		CheckBatchSizes: m.sendCheckBatch, Objects: objectsOf(cfg.Attachments.Store)})
	g.members = write.NewMembers(write.MembersConfig{Servers: g.srv, Hub: g.hub, App: app, AckWait: cfg.AckWait,
		Draining: g.draining})
	g.changes = write.NewChanger(write.ChangerConfig{Servers: g.srv, Hub: g.hub, Inbox: g.inbox, App: app,
		Outcomes: m.changes, MaxBody: cfg.MaxBody, AckWait: cfg.AckWait, Draining: g.draining, Seal: !cfg.PlainBodies})
	g.reports = write.NewReporter(write.ReporterConfig{Servers: g.srv, Hub: g.hub, App: app, AckWait: cfg.AckWait,
		Draining: g.draining})
	if g.ws, err = g.NewWebSocket(cfg.WebSocket); err != nil {
		return nil, err
	}
	g.promHandler = promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})
	g.routes = g.routeTable()
	if g.handler, err = g.buildHandler(); err != nil {
		return nil, err
	}
	return g, nil
}

// Handler returns the HTTP handler of every endpoint.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Listen runs the notification hub (one dedicated LISTEN connection,
// reconnected with backoff), the WebSocket pusher and the fetches of the
// identity provider's key set (Config.AuthJWKSURL) until ctx ends. Without
// it, long-polls only end by their timeout, sends answer 202 and tokens
// that need the key set are refused. Run calls it; tests that serve
// Handler themselves run it beside.
func (g *Gateway) Listen(ctx context.Context) error {
	connects := make([]func(context.Context) (*pgx.Conn, error), len(g.srv.Pools))
	for i, pool := range g.srv.Pools {
		cc := pool.Config().ConnConfig.Copy()
		if cc.RuntimeParams == nil {
			cc.RuntimeParams = map[string]string{}
		}
		cc.RuntimeParams["application_name"] = "inboxd-gateway-listen"
		connects[i] = func(ctx context.Context) (*pgx.Conn, error) {
			if g.beforeConnect != nil {
				g.beforeConnect(ctx)
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return pgx.ConnectConfig(cctx, cc)
		}
	}
	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return g.hub.RunServers(ctx, g.cfg.Channel, g.cfg.ListenBackoffMax, connects) })
	// The WebSocket pusher lives as long as the hub that feeds it; when
	// ctx ends every session is closed with 1012.
	eg.Go(func() error { return g.ws.Run(ctx) })
	eg.Go(func() error { return g.eph.Run(ctx) })
	eg.Go(func() error { return g.auth.verifier.Run(ctx) })
	eg.Go(func() error { return g.runSweeper(ctx) })
	eg.Go(func() error { return g.runThumbnails(ctx) })
	eg.Go(func() error { return g.runRevocations(ctx) })
	eg.Go(func() error { return g.runRateShare(ctx) })
	return eg.Wait()
}

// Drain releases every held long-poll (each answers at once, with
// Connection: close) and makes new ones answer without holding; waiting
// sends answer 202 pending. Run calls it on shutdown. It is idempotent.
func (g *Gateway) Drain() {
	g.drainOnce.Do(func() { close(g.draining) })
}

func (g *Gateway) isDraining() bool {
	select {
	case <-g.draining:
		return true
	default:
		return false
	}
}

// HeldPolls returns the number of long-polls currently held.
func (g *Gateway) HeldPolls() int { return int(g.held.Load()) }

func (g *Gateway) acquireHold() bool {
	if g.held.Add(1) > int64(g.cfg.MaxHeldPolls) {
		g.held.Add(-1)
		return false
	}
	return true
}

func (g *Gateway) releaseHold() { g.held.Add(-1) }

// Run listens on Config.Addr and serves until ctx ends; see Serve.
func (g *Gateway) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.cfg.Addr)
	if err != nil {
		return fmt.Errorf("gateway: listen on %s: %w", g.cfg.Addr, err)
	}
	return g.Serve(ctx, ln)
}

// Serve serves Handler on ln and runs Listen until ctx ends, then shuts down
// gracefully: it stops accepting, releases the held long-polls (Drain),
// waits up to ShutdownTimeout for the requests in flight and closes.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// The whole request, body included; net/http lifts the deadline
		// once the handler runs (held long-polls) and on hijack (WebSocket).
		ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute,
		// Twice the limit: what lies between is answered by the handler
		// (431 in the error shape); beyond, net/http answers 431 itself,
		// in plain text, which jsonErrorListener rewrites.
		MaxHeaderBytes: 2 * g.cfg.MaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	g.log.Info("gateway listening", "addr", ln.Addr().String())
	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return g.Listen(ctx) })
	eg.Go(func() error {
		if err := srv.Serve(jsonErrorListener{ln}); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("gateway: serve: %w", err)
		}
		return nil
	})
	eg.Go(func() error {
		<-ctx.Done()
		g.Drain()
		sctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
			return fmt.Errorf("gateway: shutdown: %w", err)
		}
		return nil
	})
	return eg.Wait()
}
