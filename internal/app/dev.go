package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/inboxd/inboxd/internal/pgserver"
)

// DevInfra is what `inboxd dev` starts for itself: an embedded Kafka
// (kfake, persisted under the data dir) unless brokers are given, and a
// private PostgreSQL unless a database URL is given.
type DevInfra struct {
	DatabaseURL string
	Brokers     []string
	pg          *pgserver.Server
	kafka       *kfake.Cluster
}

// DevConfig configures StartDev.
type DevConfig struct {
	DataDir     string
	DatabaseURL string   // empty: start PostgreSQL under DataDir/pg
	Brokers     []string // empty: start kfake under DataDir/kafka
	PGPort      int
	KafkaPort   int
	Partitions  int
	Logger      *slog.Logger
}

// StartDev starts what cfg does not point at. Stop it with Close.
func StartDev(ctx context.Context, cfg DevConfig) (*DevInfra, error) {
	d := &DevInfra{DatabaseURL: cfg.DatabaseURL, Brokers: cfg.Brokers}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	if d.DatabaseURL == "" {
		s, err := pgserver.Start(ctx, pgserver.Config{Dir: filepath.Join(cfg.DataDir, "pg"), Port: cfg.PGPort, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("start embedded PostgreSQL: %w", err)
		}
		d.pg = s
		if err := createDatabase(ctx, s.URL, "inboxd"); err != nil {
			d.Close()
			return nil, err
		}
		d.DatabaseURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/inboxd?sslmode=disable", s.Port)
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
// close), then PostgreSQL.
func (d *DevInfra) Close() {
	if d.kafka != nil {
		d.kafka.Close()
		d.kafka = nil
	}
	if d.pg != nil {
		_ = d.pg.Stop()
		d.pg = nil
	}
}
