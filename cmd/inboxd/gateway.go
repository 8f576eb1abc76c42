package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/gateway/ephemeral"
	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/ws"
	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/placement"
)

// gatewayFlags are the settings of a gateway.
type gatewayFlags struct {
	httpAddr   string
	authSecret string
	// identity provider (docs/operations.md, "Identity")
	authJWKSURL        string
	authJWKSRefresh    time.Duration
	authJWKSMinRefresh time.Duration
	authIssuer         string
	authAudience       string
	authLeeway         time.Duration
	authUserClaim      string
	searchTimeout      time.Duration
	ackWait            time.Duration
	longPollMax        time.Duration
	maxHeldPolls       int
	sendRate           float64
	sendBurst          int
	serverRate         float64
	serverBurst        int
	syncRate           float64
	syncBurst          int
	tooLongLag         int64
	shutdownTimeout    time.Duration
	wsHeartbeat        time.Duration
	wsOrigins          string
	wsMaxConns         int
	wsMaxPerUser       int
	wsWriteTimeout     time.Duration
	wsSlowTimeout      time.Duration
	msgCacheBytes      int64
	headCacheUsers     int
	countsCacheUsers   int
	tokenCache         int
	revocationPoll     time.Duration
	rateShare          time.Duration
	conversationRoles  bool
	plainBodies        bool
	mentionAllMax      int
	sendCheckBatch     int
	sendCheckRunners   int
	wsLargePushRate    float64
	// reconnect hints and start-up admission
	reconnectHints bool
	admitRate      float64
	admitBurst     int
	admitStartup   time.Duration
	restartDelay   time.Duration
	// typing and presence
	typingExpiry   time.Duration
	typingInterval time.Duration
	presenceGrace  time.Duration
	presenceExpiry time.Duration
	// attachments (attachments.go)
	attach attachmentFlags
}

func (f *gatewayFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.httpAddr, "http-addr", gateway.DefaultAddr, "HTTP address of the API and the operator endpoints")
	fs.StringVar(&f.authSecret, "auth-secret", "", "HS256 secret of the bearer tokens (outside dev, this or --auth-jwks-url is required; empty: HS256 tokens refused)")
	fs.DurationVar(&f.ackWait, "ack-wait", gateway.DefaultAckWait, "how long a send waits for its projection before answering 202 pending")
	fs.DurationVar(&f.searchTimeout, "search-timeout", gateway.DefaultSearchTimeout, "longest a search runs on each PostgreSQL server before it answers 503")
	fs.DurationVar(&f.longPollMax, "long-poll-max", gateway.DefaultLongPollMax, "longest accepted long-poll wait")
	fs.IntVar(&f.maxHeldPolls, "max-held-polls", gateway.DefaultMaxHeldPolls, "long-polls held at once per process; beyond it 503 + Retry-After")
	fs.Float64Var(&f.sendRate, "send-rate", gateway.DefaultSendRate, "per-user writes per second (token bucket)")
	fs.IntVar(&f.sendBurst, "send-burst", gateway.DefaultSendBurst, "per-user write burst")
	fs.Float64Var(&f.syncRate, "sync-rate", gateway.DefaultSyncRate, "per-user reads per second (token bucket)")
	fs.IntVar(&f.syncBurst, "sync-burst", gateway.DefaultSyncBurst, "per-user read burst")
	fs.Float64Var(&f.serverRate, "server-rate", gateway.DefaultServerRate, "server API calls per second per API key (token bucket)")
	fs.IntVar(&f.serverBurst, "server-burst", gateway.DefaultServerBurst, "server API burst per API key")
	fs.Int64Var(&f.tooLongLag, "too-long-lag", inbox.DefaultTooLongLag, "lag above which sync answers too long")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", gateway.DefaultShutdownTimeout, "time for requests in flight at shutdown")
	fs.DurationVar(&f.wsHeartbeat, "ws-heartbeat", ws.DefaultHeartbeat, "mean interval of WebSocket heartbeats (each carries the head)")
	fs.StringVar(&f.wsOrigins, "ws-allowed-origins", "", "comma-separated browser origins allowed on /v1/ws (* for any; empty: same origin only)")
	fs.IntVar(&f.wsMaxConns, "ws-max-conns", ws.DefaultMaxConns, "WebSocket connections per process; beyond it close 4029")
	fs.IntVar(&f.wsMaxPerUser, "ws-max-conns-per-user", ws.DefaultMaxConnsPerUser, "WebSocket connections per user per process")
	fs.DurationVar(&f.wsWriteTimeout, "ws-write-timeout", ws.DefaultWriteTimeout, "bound of every WebSocket write")
	fs.Int64Var(&f.msgCacheBytes, "message-cache-bytes", inbox.DefaultMessageCacheBytes, "memory of the cache of messages' wire form shared by sync pages and pushes (negative: off)")
	fs.IntVar(&f.countsCacheUsers, "counts-cache-users", inbox.DefaultCountsCacheUsers, "users whose unread and mention totals at their inbox head are remembered, so a sync at the same head does not count them again (negative: off)")
	fs.IntVar(&f.headCacheUsers, "head-cache-users", hub.DefaultHeadCacheUsers, "users whose inbox heads are remembered to answer 304 without a query (negative: off)")
	fs.IntVar(&f.tokenCache, "token-cache", gateway.DefaultTokenCache, "verified bearer tokens remembered until their expiry (negative: off)")
	fs.BoolVar(&f.conversationRoles, "conversation-roles", false, "new conversations enforce their members' roles (only admins and the owner add and remove members; moderators and up delete others' messages) unless created with roles:false; off: any member adds and removes, as before roles")
	fs.DurationVar(&f.rateShare, "rate-share-interval", gateway.DefaultRateShareInterval, "how often the gateway tells the others what its users spent of their send buckets, so that a user's --send-rate holds across gateways (negative: each gateway counts alone)")
	fs.DurationVar(&f.revocationPoll, "revocation-poll", gateway.DefaultRevocationPoll, "how often the gateway reads the revocations added through the server API: the longest a revoked token still works here")
	fs.BoolVar(&f.plainBodies, "plain-bodies", false, "append message bodies to the log in plain text instead of sealed with a key per message (outside consumers can read them, and deleting a message cannot erase its body from the log)")
	fs.IntVar(&f.sendCheckBatch, "send-check-batch", gateway.DefaultSendCheckBatch, "most send checks of one server committed in one transaction when they wait for a runner (each check writes its msg_id's body key); 1: each commits alone")
	fs.IntVar(&f.sendCheckRunners, "send-check-runners", gateway.DefaultSendCheckRunners, "send checks (or batches of them) of one server in flight at once, with --send-check-batch above 1")
	fs.IntVar(&f.mentionAllMax, "mention-all-max", gateway.DefaultMentionAllMax, "most members a conversation may have for a send to mention them all (mention_all)")
	fs.Float64Var(&f.wsLargePushRate, "ws-large-push-rate", ws.DefaultLargePushRate, "paces the pushes of a read-mode conversation: one with n connected members here is pushed at most every n/rate seconds (at most 1s), so its frames cost about this many writes a second (negative: never paced)")
	fs.DurationVar(&f.wsSlowTimeout, "ws-slow-timeout", ws.DefaultSlowTimeout, "a connection that cannot catch up for this long is closed with 4008")
	f.bindEphemeral(fs)
	f.bindReconnect(fs)
	f.bindIdentity(fs)
	f.attach.bind(fs)
}

// bindIdentity binds the settings of the identity provider's tokens
// (docs/operations.md, "Identity").
func (f *gatewayFlags) bindIdentity(fs *flag.FlagSet) {
	fs.StringVar(&f.authJWKSURL, "auth-jwks-url", "", "http(s) URL of the identity provider's JWKS: tokens signed RS256, ES256 or EdDSA by its keys (named by kid) are accepted; until the first fetch succeeds /readyz is 503 and such tokens get 503")
	fs.DurationVar(&f.authJWKSRefresh, "auth-jwks-refresh", gateway.DefaultAuthJWKSRefresh, "period of the JWKS fetch: a key the provider removed stops verifying within it")
	fs.DurationVar(&f.authJWKSMinRefresh, "auth-jwks-min-refresh", gateway.DefaultAuthJWKSMinRefresh, "least time between two JWKS fetches: a token with an unknown kid waits at most this long for the next fetch")
	fs.StringVar(&f.authIssuer, "auth-issuer", "", "required iss of every token (empty: not checked)")
	fs.StringVar(&f.authAudience, "auth-audience", "", "value every token's aud must contain (empty: not checked)")
	fs.DurationVar(&f.authLeeway, "auth-leeway", 0, "clock skew allowed on a token's exp, nbf and iat")
	fs.StringVar(&f.authUserClaim, "auth-user-claim", gateway.DefaultAuthUserClaim, "claim holding the user id: a positive decimal string (a claim other than sub may also be a JSON integer)")
}

// bindReconnect binds the settings of the reconnect hints and the start-up
// admission (docs/operations.md, "Restarts and deploys").
func (f *gatewayFlags) bindReconnect(fs *flag.FlagSet) {
	fs.BoolVar(&f.reconnectHints, "reconnect-hints", true, "tell clients when to come back: a drain's 1012 and 503s carry retry_after_ms spread at --admit-rate, the welcome a hint for a crash, and a starting gateway admits sessions at --admit-rate (false: bare 1012, no admission)")
	fs.Float64Var(&f.admitRate, "admit-rate", gateway.DefaultAdmitRate, "sessions per second (WebSocket hellos, HTTP catch-up syncs) a starting gateway admits, and the rate a drain spreads its clients' reconnects at")
	fs.IntVar(&f.admitBurst, "admit-burst", 0, "sessions admitted at once above --admit-rate (0: a tenth of the rate)")
	fs.DurationVar(&f.admitStartup, "admit-startup", gateway.DefaultAdmitStartup, "how long after start the admission applies (and until the clients it refused are back)")
	fs.DurationVar(&f.restartDelay, "restart-delay", 0, "when a drained client should come back, before the spread: 0 behind a load balancer with other gateways, the time a restart takes where one gateway serves alone; also the after_ms of the welcome's crash hint")
}

// bindEphemeral binds the settings of typing and presence.
func (f *gatewayFlags) bindEphemeral(fs *flag.FlagSet) {
	fs.DurationVar(&f.typingExpiry, "typing-expiry", ephemeral.DefaultTypingExpiry, "how long clients show a member typing without a newer typing frame (expires_in_ms)")
	fs.DurationVar(&f.typingInterval, "typing-interval", ephemeral.DefaultTypingInterval, "at most one typing broadcast per user and conversation per gateway per interval; faster frames are dropped")
	fs.DurationVar(&f.presenceGrace, "presence-grace", ephemeral.DefaultPresenceGrace, "a user stays online this long after their last WebSocket on a gateway closed (reconnects publish nothing)")
	fs.DurationVar(&f.presenceExpiry, "presence-expiry", ephemeral.DefaultPresenceExpiry, "a gateway whose presence heartbeat (every expiry/3) is older is dead: its users go offline; same on every gateway")
}

func (f *gatewayFlags) config(c *common, log *slog.Logger) gateway.Config {
	return gateway.Config{
		Addr:               f.httpAddr,
		AuthSecret:         []byte(f.authSecret),
		AuthJWKSURL:        f.authJWKSURL,
		AuthJWKSRefresh:    f.authJWKSRefresh,
		AuthJWKSMinRefresh: f.authJWKSMinRefresh,
		AuthIssuer:         f.authIssuer,
		AuthAudience:       f.authAudience,
		AuthLeeway:         f.authLeeway,
		AuthUserClaim:      f.authUserClaim,
		AckWait:            f.ackWait,
		SearchTimeout:      f.searchTimeout,
		MaxBody:            c.maxBody,
		PlainBodies:        f.plainBodies,
		MentionAllMax:      f.mentionAllMax,
		SendCheckBatch:     f.sendCheckBatch,
		SendCheckRunners:   f.sendCheckRunners,
		LongPollMax:        f.longPollMax,
		MaxHeldPolls:       f.maxHeldPolls,
		SendRate:           rate.Limit(f.sendRate),
		SendBurst:          f.sendBurst,
		SyncRate:           rate.Limit(f.syncRate),
		SyncBurst:          f.syncBurst,
		TooLongLag:         f.tooLongLag,
		ShutdownTimeout:    f.shutdownTimeout,
		MessageCacheBytes:  f.msgCacheBytes,
		HeadCacheUsers:     f.headCacheUsers,
		CountsCacheUsers:   f.countsCacheUsers,
		TokenCache:         f.tokenCache,
		RevocationPoll:     f.revocationPoll,
		RateShareInterval:  f.rateShare,
		ConversationRoles:  f.conversationRoles,
		WebSocket: gateway.WSConfig{
			HeartbeatInterval: f.wsHeartbeat,
			AllowedOrigins:    config.SplitList(f.wsOrigins),
			MaxConns:          f.wsMaxConns,
			MaxConnsPerUser:   f.wsMaxPerUser,
			WriteTimeout:      f.wsWriteTimeout,
			SlowTimeout:       f.wsSlowTimeout,
			LargePushRate:     f.wsLargePushRate,
		},
		Reconnect: gateway.ReconnectConfig{
			Disabled:     !f.reconnectHints,
			AdmitRate:    f.admitRate,
			AdmitBurst:   f.admitBurst,
			AdmitStartup: f.admitStartup,
			RestartDelay: f.restartDelay,
		},
		ServerAPI: gateway.ServerAPIConfig{Rate: rate.Limit(f.serverRate), Burst: f.serverBurst},
		Ephemeral: gateway.EphemeralConfig{
			TypingExpiry:   f.typingExpiry,
			TypingInterval: f.typingInterval,
			PresenceGrace:  f.presenceGrace,
			PresenceExpiry: f.presenceExpiry,
		},
		Logger: log,
	}
}

func runGateway(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	var c common
	var f gatewayFlags
	c.bind(fs, true)
	f.bind(fs)
	fs.Usage = config.Usage(fs, "inboxd gateway: the HTTP and WebSocket API of docs/protocol.md")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	log, err := c.logger()
	if err != nil {
		return err
	}
	log = log.With("service", "gateway")
	if f.authSecret == "" && f.authJWKSURL == "" {
		return errors.New("no token verification: set --auth-secret (INBOXD_AUTH_SECRET), --auth-jwks-url (INBOXD_AUTH_JWKS_URL) or both")
	}
	if c.dbMaxConns == 0 {
		c.dbMaxConns = gateway.DBMaxConns()
	}
	pool, prod, closeDeps, err := c.connect(ctx, log)
	if err != nil {
		return err
	}
	defer closeDeps()
	pl, loaded, closeServers, err := c.openPlacement(ctx, pool, log)
	if err != nil {
		return err
	}
	defer closeServers()
	reg := app.NewRegistry()
	cfg := f.config(&c, log)
	cfg.Registerer = reg
	if cfg.Attachments, err = f.attach.config(ctx, f.authSecret, f.httpAddr); err != nil {
		return err
	}
	g, err := gateway.NewOn(cfg, pl, prod)
	if err != nil {
		return err
	}
	// A gateway reads one version of the placement: when it changes (a
	// server added, a partition moved), the gateway ends (exit 1, to be
	// restarted by its supervisor on the new one), as a fanout does;
	// clients reconnect to the others meanwhile. One LISTEN on the
	// catalog, and a look every 5 s.
	eg, gctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return g.Run(gctx) })
	eg.Go(func() error { return watchPlacement(gctx, pool, loaded.Version, log) })
	return eg.Wait()
}

// openPlacement reads the placement from the catalog and opens a pool on
// each of its other servers (migrated, as the catalog's is), for a process
// that reads every server: pools[0] is the catalog itself. It returns the
// placement as loaded too, to watch.
func (c *common) openPlacement(ctx context.Context, catalog *pgxpool.Pool, log *slog.Logger) (gateway.Placement, *placement.Map, func(), error) {
	m, err := placement.Load(ctx, catalog)
	if err != nil {
		return gateway.Placement{}, nil, nil, err
	}
	pl := gateway.Placement{Map: m, Pools: []*pgxpool.Pool{catalog}, Partitions: 1, Version: m.Version}
	closeAll := func() {
		for _, p := range pl.Pools[1:] {
			p.Close()
		}
	}
	if !m.Sharded() {
		// Every partition on server 1: today's deployment, whatever
		// servers were added for a move to come.
		pl.Map = placement.Single()
		return pl, m, closeAll, nil
	}
	if pl.Partitions, err = topicPartitions(ctx, config.SplitList(c.brokers), c.topic); err != nil {
		return gateway.Placement{}, nil, nil, err
	}
	for _, s := range m.Servers[1:] {
		pool, err := app.OpenDB(ctx, s.DSN, catalog.Config().MaxConns, true, log)
		if err != nil {
			closeAll()
			return gateway.Placement{}, nil, nil, fmt.Errorf("server %d (%s): %w", s.ID, s.Name, err)
		}
		pl.Pools = append(pl.Pools, pool)
	}
	log.Info("reading a placement of several servers", "servers", len(pl.Pools), "partitions", pl.Partitions,
		"placement_version", m.Version)
	return pl, m, closeAll, nil
}
