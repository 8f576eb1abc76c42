package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/web"
)

func runDev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	var c common
	var f fanoutFlags
	c.bind(fs, true)
	f.bind(fs)
	dataDir := fs.String("data-dir", "./data", "where the embedded Kafka log and PostgreSQL cluster live")
	pgPort := fs.Int("pg-port", 54329, "port of the embedded PostgreSQL (when no database URL is given)")
	kafkaPort := fs.Int("kafka-port", 9092, "port of the embedded Kafka (when no brokers are given)")
	var gf gatewayFlags
	gf.bind(fs)
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
		DataDir: *dataDir, DatabaseURL: c.databaseURL, Brokers: config.SplitList(c.brokers),
		PGPort: *pgPort, KafkaPort: *kafkaPort, Partitions: c.partitions, Logger: log,
	})
	if err != nil {
		return err
	}
	defer infra.Close()
	c.databaseURL = infra.DatabaseURL
	c.brokers = fmt.Sprint(infra.Brokers[0])
	for _, b := range infra.Brokers[1:] {
		c.brokers += "," + b
	}
	if gf.authSecret == "" {
		gf.authSecret = "inboxd-dev-secret"
		log.Warn("no auth secret given; using the well-known dev secret (never do this in production)")
	}
	fmt.Printf("inboxd dev\n  DATABASE_URL=%s\n  INBOXD_KAFKA_BROKERS=%s\n  http://%s\n", c.databaseURL, c.brokers, gf.httpAddr)

	if c.dbMaxConns == 0 {
		// The apply workers, the advisory lock and retention, and the gateway.
		c.dbMaxConns = max(4, f.applyWorkers+6)
	}
	pool, prod, closeDeps, err := c.connect(ctx, log)
	if err != nil {
		return err
	}
	defer closeDeps()
	reg := app.NewRegistry()
	fcfg := f.config(&c, log.With("service", "fanout"))
	fcfg.Registerer = reg
	if fcfg.InstanceID == fanout.AutoInstanceID {
		fcfg.InstanceID = "" // one process: nothing to take over
	}
	fo, err := fanout.New(fcfg, pool)
	if err != nil {
		return err
	}
	gcfg := gf.config(&c, log.With("service", "gateway"))
	gcfg.DevMode = true
	// The demo page logs in through dev mode's token endpoint: it is
	// served by dev only, beside the API.
	demo := web.Handler()
	gcfg.Pages = map[string]http.Handler{"GET /{$}": demo, "GET /demo/": demo}
	gcfg.Registerer = reg
	// One /readyz for the process: a stuck partition shows there too.
	gcfg.ReadyChecks = map[string]func(context.Context) error{"fanout": func(context.Context) error { return fo.Ready() }}
	gw, err := gateway.New(gcfg, pool, prod)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return fo.Run(gctx) })
	g.Go(func() error { return gw.Run(gctx) })
	err = g.Wait()
	log.Info("inboxd dev stopped")
	return err
}
