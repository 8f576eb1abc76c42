package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/analytics"
	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
)

// runAnalytics needs Kafka only: no database, no topic creation.
func runAnalytics(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("analytics", flag.ContinueOnError)
	var c common
	fs.StringVar(&c.brokers, "kafka-brokers", "", "comma-separated Kafka bootstrap brokers")
	fs.StringVar(&c.topic, "topic", events.DefaultTopic, "event topic")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	// Not --group: its INBOXD_GROUP twin is fanout's, and a shared
	// environment must not put analytics into fanout's group.
	group := fs.String("analytics-group", analytics.DefaultGroup, "consumer group of analytics, committed to Kafka (never fanout's)")
	window := fs.Duration("window", analytics.DefaultWindow, "sliding window of messages per minute and active conversations (event time, whole seconds)")
	topSenders := fs.Int("top-senders", analytics.DefaultTopSenders, "how many top senders to report")
	maxBody := fs.Int("max-body", events.DefaultMaxBody, "message body limit in bytes (keep equal to fanout's)")
	httpAddr := fs.String("http-addr", "127.0.0.1:9095", "address of /healthz, /readyz and /metrics")
	printInterval := fs.Duration("print-interval", 10*time.Second, "print the figures to stdout this often (0: never)")
	drain := fs.Duration("drain-timeout", 5*time.Second, "time to finish HTTP requests at shutdown")
	fs.Usage = config.Usage(fs, "inboxd analytics: live figures from the event log in its own consumer group")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	log, err := c.logger()
	if err != nil {
		return err
	}
	log = log.With("service", "analytics")
	brokers := config.SplitList(c.brokers)
	if len(brokers) == 0 {
		return fmt.Errorf("no Kafka brokers (set --kafka-brokers or INBOXD_KAFKA_BROKERS)")
	}
	if *printInterval < 0 {
		return fmt.Errorf("print interval %v < 0", *printInterval)
	}
	reg := app.NewRegistry()
	a, err := analytics.New(analytics.Config{
		Brokers:    brokers,
		Topic:      c.topic,
		Group:      *group,
		Window:     *window,
		TopSenders: *topSenders,
		MaxBody:    *maxBody,
		Registerer: reg,
		Logger:     log,
	})
	if err != nil {
		return err
	}
	if err := app.WaitKafka(ctx, brokers, log); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.Run(gctx) })
	g.Go(func() error {
		return app.Serve(gctx, *httpAddr, app.OpsMux(reg, a.Ping), *drain, log)
	})
	if *printInterval > 0 {
		g.Go(func() error { return a.PrintEvery(gctx, os.Stdout, *printInterval) })
	}
	return g.Wait()
}
