package main

import (
	"context"
	"flag"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/producer"
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
	if len(config.SplitList(c.brokers)) == 0 {
		return fmt.Errorf("no Kafka brokers (set --kafka-brokers or INBOXD_KAFKA_BROKERS)")
	}
	pool, err := app.OpenDB(ctx, c.databaseURL, int32(c.dbMaxConns), true, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := app.WaitKafka(ctx, config.SplitList(c.brokers), log); err != nil {
		return err
	}
	prod, err := producer.New(c.producerConfig(log))
	if err != nil {
		return err
	}
	defer prod.Close()
	if err := prod.EnsureTopics(ctx); err != nil {
		return err
	}
	reg := app.NewRegistry()
	cfg := f.config(&c, log)
	cfg.Registerer = reg
	fo, err := fanout.New(cfg, pool)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return fo.Run(gctx) })
	g.Go(func() error {
		return app.Serve(gctx, *httpAddr, app.OpsMux(reg, app.Ready(pool, prod.Client())), f.drain, log)
	})
	return g.Wait()
}
