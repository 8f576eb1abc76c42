package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/inboxd/inboxd/internal/pgserver"
)

// DevInfra is what `inboxd dev` starts for itself: an embedded Kafka
// (kfake, persisted under the data dir) unless brokers are given, and a
// private PostgreSQL unless a database URL is given.
type DevInfra struct {
	DatabaseURL string
	// ServerURLs are the databases of servers 2..N of a sharded dev
	// (DevConfig.PGServers), each on a PostgreSQL of its own.
	ServerURLs []string
	Brokers    []string
	pg         []*pgserver.Server
	kafka      *kfake.Cluster
	lock       *os.File
}

// DevConfig configures StartDev.
type DevConfig struct {
	DataDir     string
	DatabaseURL string   // empty: start PostgreSQL under DataDir/pg
	Brokers     []string // empty: start kfake under DataDir/kafka
	PGPort      int
	KafkaPort   int
	// HTTPAddr is the address dev's gateway will listen on: checked with
	// the others before anything starts.
	HTTPAddr   string
	Partitions int
	// PGServers is the number of PostgreSQL servers to start (1 or 0:
	// one); server i (from 2) lives under DataDir/pg-i on PGPort+i-1.
	// It needs the embedded PostgreSQL: not with DatabaseURL.
	PGServers int
	Logger    *slog.Logger
}

// PortTakenError says which of dev's ports another process holds, and the
// setting that moves it.
type PortTakenError struct {
	What, Addr, Flag, Env string
	Err                   error
}

func (e *PortTakenError) Error() string {
	return fmt.Sprintf("port %s for the %s is taken (%v): stop what runs there, or move this one with --%s (%s)",
		e.Addr, e.What, e.Err, e.Flag, e.Env)
}

// StartDev starts what cfg does not point at. Stop it with Close. Before
// anything starts it checks that each of its ports is free and takes the
// data dir's lock, so a second dev refuses instead of sharing the first
// one's files or attaching to its servers.
func StartDev(ctx context.Context, cfg DevConfig) (*DevInfra, error) {
	if cfg.PGServers > 1 && cfg.DatabaseURL != "" {
		return nil, errors.New("--pg-servers starts its own PostgreSQL servers: it cannot be given a database URL")
	}
	if err := checkDevPorts(cfg); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	d := &DevInfra{DatabaseURL: cfg.DatabaseURL, Brokers: cfg.Brokers}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	d.lock = lock
	if d.DatabaseURL == "" {
		if err := d.startPostgres(ctx, cfg); err != nil {
			d.Close()
			return nil, err
		}
	}
	if len(d.Brokers) == 0 {
		c, err := kfake.NewCluster(
			kfake.NumBrokers(1),
			kfake.Ports(cfg.KafkaPort),
			kfake.DataDir(filepath.Join(cfg.DataDir, "kafka")),
			kfake.DefaultNumPartitions(cfg.Partitions),
		)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("start embedded Kafka (kfake) on port %d: %w", cfg.KafkaPort, err)
		}
		d.kafka = c
		d.Brokers = c.ListenAddrs()
	}
	return d, nil
}

func (d *DevInfra) startPostgres(ctx context.Context, cfg DevConfig) error {
	for i := 1; i <= max(cfg.PGServers, 1); i++ {
		dir, port := filepath.Join(cfg.DataDir, "pg"), cfg.PGPort
		if i > 1 {
			dir, port = filepath.Join(cfg.DataDir, fmt.Sprintf("pg-%d", i)), cfg.PGPort+i-1
		}
		s, err := pgserver.Start(ctx, pgserver.Config{Dir: dir, Port: port, Logger: cfg.Logger})
		if err != nil {
			return fmt.Errorf("start embedded PostgreSQL %d on port %d: %w", i, port, err)
		}
		d.pg = append(d.pg, s)
		if err := createDatabase(ctx, s.URL, "inboxd"); err != nil {
			return err
		}
		url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/inboxd?sslmode=disable", s.Port)
		if i == 1 {
			d.DatabaseURL = url
		} else {
			d.ServerURLs = append(d.ServerURLs, url)
		}
	}
	return nil
}

// checkDevPorts listens on each port dev will take and lets go at once: a
// port another process holds is refused by name before anything starts.
func checkDevPorts(cfg DevConfig) error {
	type port struct{ what, addr, flag, env string }
	var ports []port
	if cfg.HTTPAddr != "" {
		ports = append(ports, port{"HTTP API", cfg.HTTPAddr, "http-addr", "INBOXD_HTTP_ADDR"})
	}
	if cfg.DatabaseURL == "" && cfg.PGPort != 0 {
		ports = append(ports, port{"embedded PostgreSQL", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.PGPort)), "pg-port", "INBOXD_PG_PORT"})
		for i := 2; i <= cfg.PGServers; i++ {
			ports = append(ports, port{fmt.Sprintf("embedded PostgreSQL %d", i),
				net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.PGPort+i-1)), "pg-port", "INBOXD_PG_PORT"})
		}
	}
	if len(cfg.Brokers) == 0 && cfg.KafkaPort != 0 {
		// kfake listens on every interface.
		ports = append(ports, port{"embedded Kafka", net.JoinHostPort("", strconv.Itoa(cfg.KafkaPort)), "kafka-port", "INBOXD_KAFKA_PORT"})
	}
	for _, p := range ports {
		l, err := net.Listen("tcp", p.addr)
		if err != nil {
			var errno syscall.Errno
			if errors.As(err, &errno) {
				err = errno // "address already in use", without the op and address repeated
			}
			return &PortTakenError{What: p.what, Addr: strings.TrimPrefix(p.addr, ":"), Flag: p.flag, Env: p.env, Err: err}
		}
		l.Close()
	}
	return nil
}

func createDatabase(ctx context.Context, adminURL, name string) error {
	c, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var exists bool
	if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return nil
}

// Close stops what StartDev started: Kafka first (it persists its log on
// close), then PostgreSQL; then it lets go of the data dir.
func (d *DevInfra) Close() {
	if d.kafka != nil {
		d.kafka.Close()
		d.kafka = nil
	}
	for _, pg := range d.pg {
		_ = pg.Stop()
	}
	d.pg = nil
	if d.lock != nil {
		d.lock.Close()
		d.lock = nil
	}
}
