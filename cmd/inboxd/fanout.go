package main

import (
	"context"
	"flag"
	"os"

	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
)

func runFanout(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fanout", flag.ContinueOnError)
	var c common
	var f fanoutFlags
	c.bind(fs, true)
	f.bind(fs)
	httpAddr := fs.String("http-addr", "127.0.0.1:9091", "address of /healthz, /readyz and /metrics")
	fs.Usage = config.Usage(fs, "inboxd fanout: consume the event log into the PostgreSQL projections")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	log, err := c.logger()
	if err != nil {
		return err
	}
	log = log.With("service", "fanout")
	if c.dbMaxConns == 0 {
		// The apply workers, the advisory lock and retention.
		c.dbMaxConns = max(4, f.applyWorkers+2)
	}
	pool, prod, closeDeps, err := c.connect(ctx, log)
	if err != nil {
		return err
	}
	defer closeDeps()
	reg := app.NewRegistry()
	cfg := f.config(&c, log)
	cfg.Registerer = reg
	if cfg.InstanceID == fanout.AutoInstanceID {
		host, _ := os.Hostname()
		cfg.InstanceID = fanout.InstanceIDFor(host, *httpAddr)
	}
	fo, err := fanout.New(cfg, pool)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return fo.Run(gctx) })
	g.Go(func() error {
		return app.Serve(gctx, *httpAddr, app.OpsMux(reg, app.Ready(pool, prod.Client(), fo.Ready)), f.drain, log)
	})
	return g.Wait()
}
