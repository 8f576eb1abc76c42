package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/notifier"
	"github.com/inboxd/inboxd/placement"
)

// notifierFlags are the settings of the notifier (inboxd notifier, and
// inboxd dev, which runs one).
type notifierFlags struct {
	webhookURL     string
	webhookSecret  string
	group          string
	delay          time.Duration
	workers        int
	maxAttempts    int
	maxAge         time.Duration
	timeout        time.Duration
	preview        int
	maxPending     int
	presenceExpiry time.Duration
	sessionTimeout time.Duration
	reports        bool
	instanceID     string
}

func (f *notifierFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.webhookURL, "webhook-url", "", "http(s) URL that receives one signed POST per notification (docs/notifications.md)")
	fs.StringVar(&f.webhookSecret, "webhook-secret", "", "secret of the HMAC-SHA256 signature of every webhook body (X-Inboxd-Signature)")
	// Not --group: its INBOXD_GROUP twin is fanout's.
	fs.StringVar(&f.group, "notifier-group", notifier.DefaultGroup, "consumer group of the notifiers (never fanout's); its progress is stored in PostgreSQL")
	fs.DurationVar(&f.delay, "notify-delay", notifier.DefaultDelay, "a notification is due this long after the commit of its first message; a member connected then is not notified, and messages meanwhile join it")
	fs.IntVar(&f.workers, "notify-workers", notifier.DefaultWorkers, "webhook calls in flight at once per process")
	fs.IntVar(&f.maxAttempts, "notify-max-attempts", notifier.DefaultMaxAttempts, "attempts of a notification the receiver does not take before it is dead")
	fs.DurationVar(&f.maxAge, "notify-max-age", notifier.DefaultMaxAge, "age after which a notification not taken is dead")
	fs.DurationVar(&f.timeout, "notify-timeout", notifier.DefaultTimeout, "bound of one webhook call")
	fs.IntVar(&f.preview, "notify-preview", notifier.DefaultPreview, "characters of a message's text in a notification")
	fs.IntVar(&f.maxPending, "notify-max-pending", notifier.DefaultMaxPending, "notifications waiting at most; beyond, new ones are dropped (counted)")
	fs.DurationVar(&f.sessionTimeout, "notifier-session-timeout", notifier.DefaultSessionTimeout, "group session timeout: how long the partitions of a notifier that died wait before another takes them")
	fs.StringVar(&f.instanceID, "notifier-instance-id", "", "static group membership id (unique per process), so that a restarted notifier takes its partitions back at once; empty: dynamic membership")
	fs.BoolVar(&f.reports, "notify-reports", false, "post the reports of messages to the webhook too (bodies of type message.reported); off: a receiver made before reports gets only the bodies it knows")
	fs.DurationVar(&f.presenceExpiry, "notify-presence-expiry", notifier.DefaultPresenceExpiry, "the gateways' --presence-expiry: a connection of a gateway silent longer does not count")
}

func (f *notifierFlags) config(c *common, log *slog.Logger) notifier.Config {
	return notifier.Config{
		Brokers: config.SplitList(c.brokers), Topic: c.topic, Group: f.group,
		WebhookURL: f.webhookURL, WebhookSecret: []byte(f.webhookSecret),
		Delay: f.delay, Workers: f.workers, MaxAttempts: f.maxAttempts, MaxAge: f.maxAge, Timeout: f.timeout,
		Preview: f.preview, MaxPending: f.maxPending, PresenceExpiry: f.presenceExpiry, SessionTimeout: f.sessionTimeout,
		InstanceID: f.instanceID, Reports: f.reports,
		Logger: log,
	}
}

func runNotifier(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("notifier", flag.ContinueOnError)
	var c common
	var f notifierFlags
	c.bind(fs, false)
	fs.StringVar(&c.brokers, "kafka-brokers", "", "comma-separated Kafka bootstrap brokers")
	fs.StringVar(&c.topic, "topic", events.DefaultTopic, "event topic")
	f.bind(fs)
	httpAddr := fs.String("http-addr", "127.0.0.1:9096", "address of /healthz, /readyz and /metrics")
	shardServer := fs.Int("shard-server", int(placement.Catalog), "the server of the placement (inboxd shards list) whose conversations this notifier notifies of; with one server, 1")
	drain := fs.Duration("drain-timeout", 5*time.Second, "time to finish HTTP requests at shutdown")
	fs.Usage = config.Usage(fs, "inboxd notifier: notify members who are not connected through a webhook")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	log, err := c.logger()
	if err != nil {
		return err
	}
	log = log.With("service", "notifier")
	if f.webhookURL == "" || f.webhookSecret == "" {
		return errors.New("set --webhook-url and --webhook-secret (or INBOXD_WEBHOOK_URL, INBOXD_WEBHOOK_SECRET)")
	}
	brokers, pool, err := c.brokersAndDB(ctx, int32(max(4, c.dbMaxConns, f.workers+3)), log)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := app.WaitKafka(ctx, brokers, log); err != nil {
		return err
	}
	reg := app.NewRegistry()
	cfg := f.config(&c, log)
	cfg.Registerer = reg
	catalog := pool
	pl, loaded, closeServers, err := c.openPlacement(ctx, catalog, log)
	if err != nil {
		return err
	}
	defer closeServers()
	if pl.Map.Sharded() || *shardServer != int(placement.Catalog) {
		// One server of several: its partitions, its conversations'
		// notifications, on its database.
		i := slices.IndexFunc(pl.Map.Servers, func(s placement.Server) bool { return int(s.ID) == *shardServer })
		if i < 0 {
			return fmt.Errorf("notifier: the placement has no server %d (inboxd shards list)", *shardServer)
		}
		server := pl.Map.Servers[i].ID
		cfg.Group = fmt.Sprintf("%s.%d", cfg.Group, server)
		cfg.Servers = notifierServers(pl, server)
		pool = pl.Pools[i]
		log.Info("notifying of one server's conversations", "server", server, "partitions", pl.Map.Partitions(server, pl.Partitions),
			"placement_version", pl.Map.Version)
	}
	n, err := notifier.New(cfg, pool)
	if err != nil {
		return err
	}
	ready := func() error {
		if !n.Ready() {
			return errors.New("notifier: not consuming yet")
		}
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return n.Run(gctx) })
	if len(loaded.Servers) > 1 {
		// Like a fanout, a notifier serves one version of the placement.
		g.Go(func() error { return watchPlacement(gctx, catalog, loaded.Version, log) })
	}
	g.Go(func() error {
		return app.Serve(gctx, *httpAddr, app.OpsMux(reg, app.Ready(pool, nil, ready)), *drain, log)
	})
	return g.Wait()
}

// notifierServers is the notifier of server's view of placement pl.
func notifierServers(pl gateway.Placement, server int32) *notifier.Servers {
	m, n := pl.Map, pl.Partitions
	index := map[int32]int{}
	for i, s := range m.Servers {
		index[s.ID] = i
	}
	return &notifier.Servers{Catalog: pl.Pools[0], All: pl.Pools,
		OfUser: func(user int64) *pgxpool.Pool { return pl.Pools[index[m.Server(placement.OfUser(user, n))]] },
		Owns:   func(p int32) bool { return m.Serves(p, server) }}
}
