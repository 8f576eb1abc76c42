package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/projector"
)

// common are the settings most subcommands share.
type common struct {
	databaseURL       string
	brokers           string
	topic             string
	partitions        int
	replicationFactor int
	createTopics      bool
	logLevel          string
	logFormat         string
	dbMaxConns        int
	maxBody           int
	largeThreshold    int
}

func (c *common) bind(fs *flag.FlagSet, kafka bool) {
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL URL of the projections")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.IntVar(&c.dbMaxConns, "db-max-conns", 0, "PostgreSQL pool size (0: gateway max(16, cores), each send waits on its commit; fanout max(4, apply workers + 2) + 3; dev apply workers + 2 + the gateway's; others pgx's max(4, cores))")
	if kafka {
		fs.StringVar(&c.brokers, "kafka-brokers", "", "comma-separated Kafka bootstrap brokers")
		fs.StringVar(&c.topic, "topic", events.DefaultTopic, "event topic (the DLQ is <topic>.dlq)")
		fs.IntVar(&c.partitions, "partitions", producer.DefaultPartitions, "partitions of a topic created by inboxd")
		fs.IntVar(&c.replicationFactor, "replication-factor", 3, "replication factor of a topic created by inboxd; a cluster with fewer brokers refuses it, so a single-broker setup must ask for 1 explicitly (dev defaults to 1)")
		fs.BoolVar(&c.createTopics, "create-topics", true, "create the topics when missing")
		fs.IntVar(&c.maxBody, "max-body", 4096, "message body limit in bytes (gateway answers 413 above it; fanout sends longer records to the DLQ)")
		fs.IntVar(&c.largeThreshold, "large-threshold", projector.DefaultLargeThreshold, "members above which a conversation switches to read fan-out (docs/large-conversations.md); keep fanout's and replay's equal")
	}
}

func (c *common) logger() (*slog.Logger, error) { return config.Logger(c.logLevel, c.logFormat) }

// connect opens PostgreSQL (migrated) and a producer with its topics, each
// waited for with backoff. close releases both.
func (c *common) connect(ctx context.Context, log *slog.Logger) (pool *pgxpool.Pool, prod *producer.Producer, close func(), err error) {
	brokers := config.SplitList(c.brokers)
	if len(brokers) == 0 {
		return nil, nil, nil, errors.New("no Kafka brokers (set --kafka-brokers or INBOXD_KAFKA_BROKERS)")
	}
	if pool, err = app.OpenDB(ctx, c.databaseURL, int32(c.dbMaxConns), true, log); err != nil {
		return nil, nil, nil, err
	}
	if err = app.WaitKafka(ctx, brokers, log); err == nil {
		prod, err = producer.New(c.producerConfig(log))
	}
	if err == nil {
		if err = prod.EnsureTopics(ctx); err != nil {
			prod.Close()
		}
	}
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	return pool, prod, func() { prod.Close(); pool.Close() }, nil
}

// brokersAndDB is what the one-off commands (replay, offsets) need: the
// brokers, required, and a migrated pool of conns connections.
func (c *common) brokersAndDB(ctx context.Context, conns int32, log *slog.Logger) ([]string, *pgxpool.Pool, error) {
	brokers := config.SplitList(c.brokers)
	if len(brokers) == 0 {
		return nil, nil, errors.New("no Kafka brokers (set --kafka-brokers or INBOXD_KAFKA_BROKERS)")
	}
	pool, err := app.OpenDB(ctx, c.databaseURL, conns, true, log)
	if err != nil {
		return nil, nil, err
	}
	return brokers, pool, nil
}

func (c *common) producerConfig(log *slog.Logger) producer.Config {
	return producer.Config{
		Brokers:           config.SplitList(c.brokers),
		Topic:             c.topic,
		CreateTopics:      c.createTopics,
		Partitions:        int32(c.partitions),
		ReplicationFactor: int16(c.replicationFactor),
		MaxBody:           c.maxBody,
		Logger:            log,
	}
}

// fanoutFlags are the settings of a fanout.
type fanoutFlags struct {
	group          string
	maxPollRecords int
	applyWorkers   int
	convCache      int
	recordAttempts int
	drain          time.Duration
	instanceID     string
	sessionTimeout time.Duration
	rebalance      time.Duration
	logCheck       time.Duration
	kafkaCommit    time.Duration
	retention      time.Duration
	retentionEvery time.Duration
}

func (f *fanoutFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.group, "group", fanout.DefaultGroup, "fanout consumer group")
	fs.IntVar(&f.maxPollRecords, "max-poll-records", fanout.DefaultMaxPollRecords, "records per batch (one transaction)")
	fs.IntVar(&f.applyWorkers, "apply-workers", fanout.DefaultApplyWorkers, "transactions applying one poll concurrently, split by partition (each holds a PostgreSQL connection)")
	fs.IntVar(&f.convCache, "conversation-cache", projector.DefaultConversationCache, "conversations whose state (row and members) the fanout keeps between batches instead of reading it again, while the partition's stored offset says no other process wrote it (0: the default; negative: none)")
	fs.IntVar(&f.recordAttempts, "record-attempts", fanout.DefaultRecordAttempts, "attempts of a record that fails to project because of its data before it goes to the DLQ (transient failures retry without bound)")
	fs.StringVar(&f.instanceID, "instance-id", fanout.AutoInstanceID, "static group membership id, so that a restarted process takes its partitions back at once; auto: <host name>-<port of --http-addr> (dynamic membership when the port is 0); empty: dynamic membership")
	fs.DurationVar(&f.sessionTimeout, "session-timeout", fanout.DefaultSessionTimeout, "group session timeout: how long the partitions of a crashed fanout wait before they move (brokers refuse less than their group.min.session.timeout.ms, 6s by default)")
	fs.DurationVar(&f.rebalance, "rebalance-timeout", fanout.DefaultRebalanceTimeout, "how long a rebalance waits for members to rejoin")
	fs.DurationVar(&f.logCheck, "log-check-interval", 5*time.Second, "time between checks of the stored offsets against the log (topic id, start and end offsets), which also refresh the lag gauge")
	fs.DurationVar(&f.kafkaCommit, "kafka-commit-interval", 5*time.Second, "time between commits of the applied offsets to the Kafka group, for lag tooling only (negative disables)")
	fs.DurationVar(&f.retention, "retention", 7*24*time.Hour, "how long inbox entries are kept (messages are kept forever)")
	fs.DurationVar(&f.retentionEvery, "retention-interval", 10*time.Minute, "time between retention runs (negative disables)")
	fs.DurationVar(&f.drain, "drain-timeout", 15*time.Second, "time to finish the current batch and leave the group at shutdown")
}

func (f *fanoutFlags) config(c *common, log *slog.Logger) fanout.Config {
	return fanout.Config{
		Brokers:             config.SplitList(c.brokers),
		Topic:               c.topic,
		Group:               f.group,
		MaxPollRecords:      f.maxPollRecords,
		ApplyWorkers:        f.applyWorkers,
		ConversationCache:   f.convCache,
		RecordAttempts:      f.recordAttempts,
		MaxBody:             c.maxBody,
		LargeThreshold:      c.largeThreshold,
		InstanceID:          f.instanceID,
		SessionTimeout:      f.sessionTimeout,
		RebalanceTimeout:    f.rebalance,
		LogCheckInterval:    f.logCheck,
		KafkaCommitInterval: f.kafkaCommit,
		Retention:           f.retention,
		RetentionInterval:   f.retentionEvery,
		DrainTimeout:        f.drain,
		Logger:              log,
	}
}
