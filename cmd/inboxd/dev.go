package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/notifier"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/web"
)

// devFlags are dev's own settings, beside the fanout's and the gateway's.
type devFlags struct {
	dataDir   string
	pgPort    int
	kafkaPort int
	noFanout  bool
}

func (d *devFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&d.dataDir, "data-dir", "./data", "where the embedded Kafka log and PostgreSQL cluster live")
	fs.IntVar(&d.pgPort, "pg-port", 54329, "port of the embedded PostgreSQL (when no database URL is given)")
	fs.IntVar(&d.kafkaPort, "kafka-port", 9092, "port of the embedded Kafka (when no brokers are given)")
	fs.BoolVar(&d.noFanout, "no-fanout", false, "run without the fanout: the log and the database stay up for inboxd replay or an inboxd fanout of its own; nothing is projected meanwhile")
}

func runDev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	var c common
	var f fanoutFlags
	var d devFlags
	var gf gatewayFlags
	var nf notifierFlags
	c.bind(fs, true)
	f.bind(fs)
	d.bind(fs)
	gf.bind(fs)
	nf.bind(fs)
	fs.Usage = config.Usage(fs, "inboxd dev: everything in one process on an embedded Kafka (kfake) and PostgreSQL")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	// Dev runs on one broker (its embedded one, or a local one): a single
	// copy of the log unless asked otherwise.
	if !config.Given(fs, "replication-factor") {
		c.replicationFactor = 1
	}
	log, err := c.logger()
	if err != nil {
		return err
	}
	infra, err := app.StartDev(ctx, app.DevConfig{
		DataDir: d.dataDir, DatabaseURL: c.databaseURL, Brokers: config.SplitList(c.brokers),
		PGPort: d.pgPort, KafkaPort: d.kafkaPort, HTTPAddr: gf.httpAddr, Partitions: c.partitions, Logger: log,
	})
	if err != nil {
		return err
	}
	defer infra.Close()
	c.databaseURL = infra.DatabaseURL
	c.brokers = strings.Join(infra.Brokers, ",")
	if gf.authSecret == "" {
		gf.authSecret = "inboxd-dev-secret"
		log.Warn("no auth secret given; using the well-known dev secret (never do this in production)")
	}
	fmt.Printf("inboxd dev\n  DATABASE_URL=%s\n  INBOXD_KAFKA_BROKERS=%s\n  http://%s\n", c.databaseURL, c.brokers, gf.httpAddr)

	if c.dbMaxConns == 0 {
		// The apply workers, the advisory lock and retention, and the
		// gateway's own (gateway.DBMaxConns).
		c.dbMaxConns = f.applyWorkers + 2 + gateway.DBMaxConns() + nf.workers/2
	}
	pool, prod, closeDeps, err := c.connect(ctx, log)
	if err != nil {
		return err
	}
	defer closeDeps()
	err = serveDev(ctx, log, &c, &f, &gf, &nf, d.noFanout, pool, prod)
	log.Info("inboxd dev stopped")
	return err
}

// serveDev runs dev's fanout (unless noFanout) and gateway until ctx ends or
// either fails.
func serveDev(ctx context.Context, log *slog.Logger, c *common, f *fanoutFlags, gf *gatewayFlags, nf *notifierFlags,
	noFanout bool, pool *pgxpool.Pool, prod *producer.Producer) error {
	reg := app.NewRegistry()
	gcfg := gf.config(c, log.With("service", "gateway"))
	gcfg.DevMode = true
	// The demo page logs in through dev mode's token endpoint: it is
	// served by dev only, beside the API.
	demo := web.Handler()
	gcfg.Pages = map[string]http.Handler{"GET /{$}": demo, "GET /demo/": demo}
	// Dev's webhook receiver (POST /dev/notifications, listed at GET
	// /v1/dev/notifications): dev's notifier delivers to
	// app.DevWebhookURL(gf.httpAddr), signed with app.DevWebhookSecret.
	devReceiver := notifier.NewDevReceiver([]byte(app.DevWebhookSecret), notifier.DefaultDevKeep)
	maps.Copy(gcfg.Pages, app.DevNotificationPages(devReceiver))
	gcfg.Registerer = reg
	g, gctx := errgroup.WithContext(ctx)
	if noFanout {
		log.Warn("fanout off (--no-fanout): events are appended but not projected until a fanout or inboxd replay runs",
			"database_url", c.databaseURL, "brokers", c.brokers)
	} else {
		fcfg := f.config(c, log.With("service", "fanout"))
		fcfg.Registerer = reg
		if fcfg.InstanceID == fanout.AutoInstanceID {
			fcfg.InstanceID = "" // one process: nothing to take over
		}
		fo, err := fanout.New(fcfg, pool)
		if err != nil {
			return err
		}
		// One /readyz for the process: a stuck partition shows there too.
		gcfg.ReadyChecks = map[string]func(context.Context) error{"fanout": func(context.Context) error { return fo.Ready() }}
		g.Go(func() error { return fo.Run(gctx) })
		n, err := devNotifier(c, gf, nf, reg, pool, log)
		if err != nil {
			return err
		}
		g.Go(func() error { return n.Run(gctx) })
	}
	gw, err := gateway.New(gcfg, pool, prod)
	if err != nil {
		return err
	}
	g.Go(func() error { return gw.Run(gctx) })
	return g.Wait()
}

// devNotifier is dev's notifier: it delivers to dev's own receiver unless
// --webhook-url names another.
func devNotifier(c *common, gf *gatewayFlags, nf *notifierFlags, reg *prometheus.Registry, pool *pgxpool.Pool,
	log *slog.Logger) (*notifier.Notifier, error) {
	if nf.webhookURL == "" {
		nf.webhookURL = app.DevWebhookURL(gf.httpAddr)
		if nf.webhookSecret == "" {
			nf.webhookSecret = app.DevWebhookSecret
		}
	}
	if nf.webhookSecret == "" {
		return nil, errors.New("--webhook-url needs --webhook-secret")
	}
	ncfg := nf.config(c, log.With("service", "notifier"))
	ncfg.Registerer = reg
	return notifier.New(ncfg, pool)
}
