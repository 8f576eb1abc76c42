package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/notifier"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/web"
)

// devFlags are dev's own settings, beside the fanout's and the gateway's.
type devFlags struct {
	dataDir   string
	pgPort    int
	kafkaPort int
	noFanout  bool
	pgServers int
}

func (d *devFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&d.dataDir, "data-dir", "./data", "where the embedded Kafka log and PostgreSQL cluster live")
	fs.IntVar(&d.pgPort, "pg-port", 54329, "port of the embedded PostgreSQL (when no database URL is given)")
	fs.IntVar(&d.kafkaPort, "kafka-port", 9092, "port of the embedded Kafka (when no brokers are given)")
	fs.IntVar(&d.pgServers, "pg-servers", 1, "PostgreSQL servers to start, each on the next port after --pg-port: with more than one, a sharded deployment whose partitions alternate between them (server 1 holds the catalog); on a fresh --data-dir, and without a database URL")
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
	embeddedPG := c.databaseURL == ""
	infra, err := app.StartDev(ctx, app.DevConfig{
		DataDir: d.dataDir, DatabaseURL: c.databaseURL, Brokers: config.SplitList(c.brokers),
		PGPort: d.pgPort, KafkaPort: d.kafkaPort, HTTPAddr: gf.httpAddr, Partitions: c.partitions, PGServers: d.pgServers, Logger: log,
	})
	if err != nil {
		return err
	}
	defer infra.Close()
	c.databaseURL = infra.DatabaseURL
	c.brokers = strings.Join(infra.Brokers, ",")
	if gf.attach.s3Endpoint == "" && gf.attach.dir == "" {
		// Attachments work at once: in the data dir, on URLs the
		// gateway signs, as kfake stands in for Kafka.
		gf.attach.dir = filepath.Join(d.dataDir, "attachments")
	}
	if gf.authSecret == "" {
		gf.authSecret = "inboxd-dev-secret"
		log.Warn("no auth secret given; using the well-known dev secret (never do this in production)")
	}
	fmt.Printf("inboxd dev\n  DATABASE_URL=%s\n  INBOXD_KAFKA_BROKERS=%s\n  http://%s\n", c.databaseURL, c.brokers, gf.httpAddr)
	for i, url := range infra.ServerURLs {
		fmt.Printf("  server %d: %s\n", i+2, url)
	}

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
	if embeddedPG {
		if err := placeDev(ctx, &c, pool, infra.ServerURLs, log); err != nil {
			return err
		}
	}
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
	var err error
	if gcfg.Attachments, err = gf.attach.config(ctx, gf.authSecret, gf.httpAddr); err != nil {
		return err
	}
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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	// A failure after some parts started stops them before the pools
	// close (a pool's Close waits for the connections they hold).
	fail := func(err error) error {
		cancel()
		_ = g.Wait()
		return err
	}
	if noFanout {
		log.Warn("fanout off (--no-fanout): events are appended but not projected until a fanout or inboxd replay runs",
			"database_url", c.databaseURL, "brokers", c.brokers)
	} else {
		fcfg := f.config(c, log.With("service", "fanout"))
		fcfg.Registerer = reg
		if fcfg.InstanceID == fanout.AutoInstanceID {
			fcfg.InstanceID = "" // one process: nothing to take over
		}
		fos, err := devStages(gctx, g, c, fcfg, pool, prod, log)
		if err != nil {
			return fail(err)
		}
		// One /readyz for the process: a stuck partition shows there too.
		gcfg.ReadyChecks = map[string]func(context.Context) error{"fanout": func(context.Context) error {
			for _, fo := range fos {
				if err := fo.Ready(); err != nil {
					return err
				}
			}
			return nil
		}}
	}
	pl, _, closeServers, err := c.openPlacement(ctx, pool, log)
	if err != nil {
		return fail(err)
	}
	defer closeServers()
	if !noFanout {
		// One notifier per server, each of its own conversations.
		for i, db := range pl.Pools {
			ncfg := nf.config(c, log.With("service", "notifier"))
			if len(pl.Pools) > 1 {
				srv := pl.Map.Servers[i].ID
				ncfg.Group = fmt.Sprintf("%s.%d", ncfg.Group, srv)
				ncfg.Servers = notifierServers(pl, srv)
				ncfg.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"server": fmt.Sprint(srv)}, reg)
			} else {
				ncfg.Registerer = reg
			}
			n, err := devNotifier(ncfg, gf, nf, db)
			if err != nil {
				return fail(err)
			}
			g.Go(func() error { return n.Run(gctx) })
		}
	}
	gw, err := gateway.NewOn(gcfg, pl, prod)
	if err != nil {
		return fail(err)
	}
	g.Go(func() error { return gw.Run(gctx) })
	return g.Wait()
}

// devStages runs dev's projection in g: one fanout on one server; on
// several, each server's conversation stage, relay and user stage, as
// `inboxd fanout --shard-server N` would (pools are closed when ctx ends).
func devStages(ctx context.Context, g *errgroup.Group, c *common, fcfg fanout.Config, catalog *pgxpool.Pool,
	prod *producer.Producer, log *slog.Logger) ([]*fanout.Fanout, error) {
	m, err := placement.Load(ctx, catalog)
	if err != nil {
		return nil, err
	}
	if !m.Sharded() {
		fo, err := fanout.New(fcfg, catalog)
		if err != nil {
			return nil, err
		}
		g.Go(func() error { return fo.Run(ctx) })
		return []*fanout.Fanout{fo}, nil
	}
	var fos []*fanout.Fanout
	reg := fcfg.Registerer
	for _, srv := range m.Servers {
		sh := shardFlags{server: int(srv.ID), retention: 7 * 24 * time.Hour}
		scfg := fcfg
		if reg != nil { // one process, a set of the stages' metrics per server
			scfg.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"server": fmt.Sprint(srv.ID)}, reg)
		}
		st, err := sh.stages(ctx, m, c, scfg, prod, catalog, log.With("server", srv.ID))
		if err != nil {
			return nil, err
		}
		fo, err := fanout.New(st.cfg, st.pool)
		if err != nil {
			st.close()
			return nil, err
		}
		fos = append(fos, fo)
		g.Go(func() error {
			defer st.close()
			run, rctx := errgroup.WithContext(ctx)
			run.Go(func() error { return fo.Run(rctx) })
			run.Go(func() error { return st.deliverer.Run(rctx) })
			return run.Wait()
		})
	}
	return fos, nil
}

// placeDev makes a fresh dev catalog the placement of its servers: each
// server added, and partition p on server p%N + 1. A catalog that already
// has them (dev restarted on its data dir) is left as it is; one that
// holds projections of a single server is refused (partitions move only
// with their state, which dev does not do).
func placeDev(ctx context.Context, c *common, catalog *pgxpool.Pool, urls []string, log *slog.Logger) error {
	m, err := placement.Load(ctx, catalog)
	if err != nil {
		return err
	}
	n := len(urls) + 1
	if n == 1 && len(m.Servers) == 1 {
		return nil
	}
	if len(m.Servers) == n {
		for i, url := range urls {
			if m.Servers[i+1].DSN != url {
				return fmt.Errorf("dev: server %d of the catalog is %s, not %s: use the --pg-port and --data-dir it was made with",
					m.Servers[i+1].ID, m.Servers[i+1].DSN, url)
			}
		}
		return nil
	}
	if len(m.Servers) != 1 {
		return fmt.Errorf("dev: the data dir holds a deployment of %d servers, not %d: start with --pg-servers %d", len(m.Servers), n, len(m.Servers))
	}
	var held bool
	if err := catalog.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM consumer_offsets)`).Scan(&held); err != nil {
		return err
	}
	if held {
		return fmt.Errorf("dev: the data dir holds the projections of one server; start --pg-servers %d on a fresh --data-dir", n)
	}
	parts, err := topicPartitions(ctx, config.SplitList(c.brokers), c.topic)
	if err != nil {
		return err
	}
	if err := addAndPlace(ctx, catalog, "dev-%d", urls, parts); err != nil {
		return err
	}
	log.Info("placed the partitions on the dev servers", "servers", n, "partitions", parts)
	return nil
}

// addAndPlace adds the databases of dsns as servers 2, 3, ... of a new
// deployment (named by the format of their id) and places partition p on
// server p%N + 1, N servers in all.
func addAndPlace(ctx context.Context, catalog *pgxpool.Pool, name string, dsns []string, parts int32) error {
	n := len(dsns) + 1
	for i, dsn := range dsns {
		s, err := placement.AddServer(ctx, catalog, fmt.Sprintf(name, i+2), dsn)
		if err != nil {
			return err
		}
		var ps []int32
		for p := range parts {
			if int(p)%n == i+1 {
				ps = append(ps, p)
			}
		}
		if len(ps) > 0 {
			if err := placement.Assign(ctx, catalog, s.ID, ps); err != nil {
				return err
			}
		}
	}
	return nil
}

// devNotifier is dev's notifier of ncfg on pool: it delivers to dev's own
// receiver (reports included) unless --webhook-url names another.
func devNotifier(ncfg notifier.Config, gf *gatewayFlags, nf *notifierFlags, pool *pgxpool.Pool) (*notifier.Notifier, error) {
	if nf.webhookURL == "" {
		ncfg.WebhookURL = app.DevWebhookURL(gf.httpAddr)
		ncfg.Reports = true // dev's receiver knows them
		if nf.webhookSecret == "" {
			ncfg.WebhookSecret = []byte(app.DevWebhookSecret)
		}
	} else if nf.webhookSecret == "" {
		return nil, errors.New("--webhook-url needs --webhook-secret")
	}
	return notifier.New(ncfg, pool)
}
