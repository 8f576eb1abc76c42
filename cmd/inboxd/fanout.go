package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/producer"
)

// shardFlags choose the server of a sharded deployment a fanout serves.
type shardFlags struct {
	server     int
	deliveries string
	retention  time.Duration
}

func (s *shardFlags) bind(fs *flag.FlagSet) {
	fs.IntVar(&s.server, "shard-server", int(placement.Catalog), "the server of the placement (inboxd shards list) whose partitions this fanout projects: its conversation stage, relay and user stage; with one server, 1")
	fs.StringVar(&s.deliveries, "deliveries-topic", "", "the topic that carries deliveries between the servers of a sharded deployment (default <topic>.deliveries)")
	fs.DurationVar(&s.retention, "deliveries-retention", 7*24*time.Hour, "how long the deliveries topic keeps its records when inboxd creates it: a user stage stopped for longer stops at the gap, visibly, instead of skipping it")
}

// stages is a fanout process's part of a sharded deployment.
type stages struct {
	cfg       fanout.Config
	pool      *pgxpool.Pool // the server's database
	catalog   *pgxpool.Pool
	deliverer *fanout.Deliverer
	close     func()
}

// stages sets up the conversation stage's config, the relay and the user
// stage of server s.server under placement m.
func (s *shardFlags) stages(ctx context.Context, m *placement.Map, c *common, cfg fanout.Config, prod *producer.Producer,
	catalog *pgxpool.Pool, log *slog.Logger) (*stages, error) {
	srv, ok := m.ServerByID(int32(s.server))
	if !ok {
		return nil, fmt.Errorf("fanout: the placement has no server %d (inboxd shards list)", s.server)
	}
	st := &stages{pool: catalog, catalog: catalog, close: func() {}}
	if srv.ID != placement.Catalog {
		pool, err := app.OpenDB(ctx, srv.DSN, int32(c.dbMaxConns), true, log)
		if err != nil {
			return nil, fmt.Errorf("fanout: server %d: %w", srv.ID, err)
		}
		st.pool, st.close = pool, pool.Close
	}
	n, err := topicPartitions(ctx, config.SplitList(c.brokers), c.topic)
	if err != nil {
		st.close()
		return nil, err
	}
	topic := s.deliveries
	if topic == "" {
		topic = c.topic + ".deliveries"
	}
	if err := producer.EnsureDeliveriesTopic(ctx, prod.Client(), c.producerConfig(log), topic, n, s.retention); err != nil {
		st.close()
		return nil, err
	}
	owns := func(p int32) bool { return m.Serves(p, srv.ID) }
	base := cfg.Group
	cfg.Group = fmt.Sprintf("%s.%d", base, srv.ID)
	cfg.Owns = owns
	cfg.Users = placement.Users{Map: m, Server: srv.ID, Partitions: n}
	cfg.PlacementVersion = m.Version
	st.cfg = cfg
	st.deliverer, err = fanout.NewDeliverer(fanout.DelivererConfig{Brokers: cfg.Brokers, Topic: topic,
		Group: fmt.Sprintf("%s-deliveries.%d", base, srv.ID), Owns: owns,
		Channel: cfg.Channel, SessionTimeout: cfg.SessionTimeout, InstanceID: cfg.InstanceID, PlacementVersion: m.Version, Logger: log, Registerer: cfg.Registerer}, st.pool)
	if err != nil {
		st.close()
		return nil, err
	}
	log.Info("serving one server of a sharded deployment", "server", srv.ID, "name", srv.Name,
		"partitions", m.Partitions(srv.ID, n), "deliveries_topic", topic, "placement_version", m.Version)
	return st, nil
}

// watchPlacement ends the process when the placement changes (exit 1, for
// its supervisor to restart it on the new one): a fanout serves one
// version of the placement. It wakes on the catalog's announcement of a
// change, and looks every 5 s in case one was missed.
func watchPlacement(ctx context.Context, catalog *pgxpool.Pool, version int64, log *slog.Logger) error {
	var conn *pgxpool.Conn
	defer func() {
		if conn != nil {
			conn.Release()
		}
	}()
	for {
		if conn == nil {
			if c, err := catalog.Acquire(ctx); err == nil {
				if _, err := c.Exec(ctx, "LISTEN "+placement.Channel); err == nil {
					conn = c
				} else {
					c.Release()
				}
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if conn != nil {
			if _, err := conn.Conn().WaitForNotification(wctx); err != nil && wctx.Err() == nil {
				conn.Release() // a broken connection: listen again
				conn = nil
			}
		} else {
			<-wctx.Done()
		}
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		m, err := placement.Load(ctx, catalog)
		if err != nil {
			log.Warn("reading the placement failed", "err", err)
			continue
		}
		if m.Version != version {
			return fmt.Errorf("the placement changed (version %d, now %d): restart to serve the new one", version, m.Version)
		}
	}
}
func runFanout(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fanout", flag.ContinueOnError)
	var c common
	var f fanoutFlags
	c.bind(fs, true)
	f.bind(fs)
	httpAddr := fs.String("http-addr", "127.0.0.1:9091", "address of /healthz, /readyz and /metrics")
	var sh shardFlags
	sh.bind(fs)
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
		// The apply workers, the advisory lock and retention; on a server
		// of a sharded deployment also the relay, the user stage and the
		// placement watch.
		c.dbMaxConns = max(4, f.applyWorkers+2) + 3
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
	m, err := placement.Load(ctx, pool)
	if err != nil {
		return err
	}
	registerPlacementMetrics(reg, m)
	g, gctx := errgroup.WithContext(ctx)
	if m.Sharded() || sh.server != int(placement.Catalog) {
		// One server of several: its conversation stage, relay and user
		// stage, on its own database.
		st, err := sh.stages(ctx, m, &c, cfg, prod, pool, log)
		if err != nil {
			return err
		}
		defer st.close()
		pool = st.pool
		g.Go(func() error { return st.deliverer.Run(gctx) })
		g.Go(func() error { return watchPlacement(gctx, st.catalog, m.Version, log) })
		cfg = st.cfg
	}
	fo, err := fanout.New(cfg, pool)
	if err != nil {
		return err
	}
	g.Go(func() error { return fo.Run(gctx) })
	g.Go(func() error {
		return app.Serve(gctx, *httpAddr, app.OpsMux(reg, app.Ready(pool, prod.Client(), fo.Ready)), f.drain, log)
	})
	return g.Wait()
}

// registerPlacementMetrics exports the placement the process serves (it
// serves one version, and restarts on the next): its version and, per
// partition a move pauses, the seconds since the move's last step, so
// that a move that stalls (an interrupted inboxd shards move) is seen.
func registerPlacementMetrics(reg prometheus.Registerer, m *placement.Map) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "inboxd", Subsystem: "placement", Name: "version",
		Help: "The version of the placement this process serves."}, func() float64 { return float64(m.Version) }))
	paused := prometheus.NewDesc("inboxd_placement_partition_paused_seconds",
		"Per partition a move pauses in the placement this process serves (its writes wait in the log): seconds since the move's last step. Absent when no move is under way.",
		[]string{"partition", "target"}, nil)
	reg.MustRegister(collectorFunc{desc: paused, collect: func(ch chan<- prometheus.Metric) {
		for _, a := range m.Moving() {
			ch <- prometheus.MustNewConstMetric(paused, prometheus.GaugeValue, time.Since(a.UpdatedAt).Seconds(),
				strconv.Itoa(int(a.Partition)), strconv.Itoa(int(a.Target)))
		}
	}})
}

// collectorFunc is a collector of one description whose metrics collect
// makes at each scrape.
type collectorFunc struct {
	desc    *prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }
