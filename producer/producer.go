// Package producer appends events to the log. It owns the Kafka producer
// settings that the exactly-once story depends on (idempotent writes,
// acks=all, key = conversation id so a conversation is totally ordered in one
// partition) and the creation of the topics. It must not read projections.
package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
)

// Defaults of Config.
const (
	// DefaultTopic is events.DefaultTopic, where the topic name lives; kept
	// here for callers written before it moved.
	DefaultTopic      = events.DefaultTopic
	DefaultPartitions = 12
	// DefaultLinger is none: a record goes out at once, and records that
	// arrive while a produce request is in flight wait for it and go
	// together in the next (an idempotent kgo producer keeps one request
	// in flight per broker), so batches still grow with the load. A
	// linger adds its length to every send at low load and buys no CPU
	// under load (docs/decisions.md, "Measured reasons behind defaults").
	DefaultLinger = time.Duration(-1)
)

// Config configures a Producer.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// Topic of the events. Default events.DefaultTopic.
	Topic string
	// DLQTopic receives records fanout cannot project. Default Topic+".dlq".
	DLQTopic string
	// CreateTopics creates Topic and DLQTopic when missing, with Partitions
	// and ReplicationFactor, infinite retention (the log is the source of
	// truth) and, with a replication factor above 2, min.insync.replicas=2.
	CreateTopics bool
	// Partitions of a created topic. Default DefaultPartitions.
	Partitions int32
	// ReplicationFactor of a created topic. Default 1 (kfake, one broker);
	// use 3 in production.
	ReplicationFactor int16
	// Linger is how long a batch waits for more records; negative is
	// none. Default DefaultLinger (none).
	Linger time.Duration
	// MaxBody is the body limit enforced before appending. Default
	// events.DefaultMaxBody.
	MaxBody int
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// ClientID names the Kafka client. Default "inboxd".
	ClientID string
	// Dialer opens the connections to the brokers (TLS, or a network with
	// faults in tests). Default a plain TCP dialer.
	Dialer func(ctx context.Context, network, host string) (net.Conn, error)
}

func (c *Config) setDefaults() {
	if c.Topic == "" {
		c.Topic = events.DefaultTopic
	}
	if c.DLQTopic == "" {
		c.DLQTopic = c.Topic + ".dlq"
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = 1
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.MaxBody == 0 {
		c.MaxBody = events.DefaultMaxBody
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ClientID == "" {
		c.ClientID = "inboxd"
	}
}

func (c *Config) validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("producer: no brokers")
	}
	if c.Partitions < 1 {
		return fmt.Errorf("producer: partitions %d < 1", c.Partitions)
	}
	if c.ReplicationFactor < 1 {
		return fmt.Errorf("producer: replication factor %d < 1", c.ReplicationFactor)
	}
	return nil
}

// Producer appends events. It is safe for concurrent use.
type Producer struct {
	cfg Config
	cl  *kgo.Client

	recreatedMu   sync.Mutex
	recreatedSeen time.Time // last time a recreated topic was noticed
}

// Position is where a record landed.
type Position struct {
	Partition int32
	Offset    int64
}

// New connects a producer. It does not wait for the brokers; EnsureTopics
// or the first Append does.
func New(cfg Config) (*Producer, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), // Kafka's murmur2 of the key
		kgo.ProducerLinger(max(cfg.Linger, 0)),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordRetries(10000),
		kgo.RetryTimeout(30 * time.Second),
		// A failed produce (a connection cut, a leader moving) waits for
		// fresh metadata before it is retried; kgo's default of at most one
		// refresh per 5s stalls every append to that broker for up to 5s.
		kgo.MetadataMinAge(500 * time.Millisecond),
	}
	if cfg.Dialer != nil {
		opts = append(opts, kgo.Dialer(cfg.Dialer))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("producer client: %w", err)
	}
	return &Producer{cfg: cfg, cl: cl}, nil
}

// Topic returns the event topic.
func (p *Producer) Topic() string { return p.cfg.Topic }

// DLQTopic returns the dead-letter topic.
func (p *Producer) DLQTopic() string { return p.cfg.DLQTopic }

// Client returns the underlying client (for admin and health checks).
func (p *Producer) Client() *kgo.Client { return p.cl }

// Close flushes and closes.
func (p *Producer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.cl.Flush(ctx)
	p.cl.Close()
}

// EnsureTopics creates the topics when CreateTopics is set and they are
// missing, retrying until ctx ends while the brokers are unreachable.
func (p *Producer) EnsureTopics(ctx context.Context) error {
	if !p.cfg.CreateTopics {
		return nil
	}
	return EnsureTopics(ctx, p.cl, p.cfg)
}

// EnsureTopics creates cfg's topics on the cluster of cl when missing and
// waits until the metadata shows them with a leader for every partition.
func EnsureTopics(ctx context.Context, cl *kgo.Client, cfg Config) error {
	cfg.setDefaults()
	adm := kadm.NewClient(cl)
	configs := map[string]*string{"retention.ms": kadm.StringPtr("-1"), "retention.bytes": kadm.StringPtr("-1")}
	if cfg.ReplicationFactor > 2 {
		configs["min.insync.replicas"] = kadm.StringPtr("2")
	}
	for _, t := range []string{cfg.Topic, cfg.DLQTopic} {
		if err := createTopic(ctx, adm, cfg, t, configs); err != nil {
			return err
		}
	}
	return waitTopics(ctx, adm, cfg.Topic, cfg.DLQTopic)
}

// EnsureDeliveriesTopic creates the deliveries topic of a sharded
// deployment (docs/scaling.md) when missing, with partitions (the event
// topic's count) and cfg's replication, keeping its records for
// retention, and waits until the metadata shows it.
func EnsureDeliveriesTopic(ctx context.Context, cl *kgo.Client, cfg Config, topic string, partitions int32, retention time.Duration) error {
	cfg.setDefaults()
	cfg.Partitions = partitions
	adm := kadm.NewClient(cl)
	configs := map[string]*string{"retention.ms": kadm.StringPtr(strconv.FormatInt(retention.Milliseconds(), 10))}
	if cfg.ReplicationFactor > 2 {
		configs["min.insync.replicas"] = kadm.StringPtr("2")
	}
	if err := createTopic(ctx, adm, cfg, topic, configs); err != nil {
		return err
	}
	return waitTopics(ctx, adm, topic)
}

// createTopic creates topic t unless it exists, retrying what is
// transient.
func createTopic(ctx context.Context, adm *kadm.Client, cfg Config, t string, configs map[string]*string) error {
	for {
		resp, err := adm.CreateTopic(ctx, cfg.Partitions, cfg.ReplicationFactor, configs, t)
		if err == nil {
			err = resp.Err
		}
		if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
			return nil
		}
		if errors.Is(err, kerr.InvalidReplicationFactor) {
			// Not transient: the cluster has fewer brokers than asked.
			return fmt.Errorf("create topic %s with replication factor %d: %w (a cluster with fewer brokers cannot hold that many copies; "+
				"ask for fewer explicitly, e.g. --replication-factor 1 for a single broker, knowing the log then has one copy)", t, cfg.ReplicationFactor, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("create topic %s: %w", t, err)
		}
		cfg.Logger.Warn("creating topic failed, retrying", "topic", t, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("create topic %s: %w", t, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// waitTopics waits until the metadata shows every partition of topics with
// a leader. Kafka acknowledges a CreateTopics once its controller has the
// topic, before the brokers' metadata has it: a metadata or offsets request
// right after it can answer UNKNOWN_TOPIC_OR_PARTITION.
func waitTopics(ctx context.Context, adm *kadm.Client, topics ...string) error {
	for {
		details, err := adm.ListTopics(ctx, topics...)
		if err == nil {
			err = details.Error()
		}
		if err == nil {
			for _, t := range topics {
				d, ok := details[t]
				switch {
				case !ok || len(d.Partitions) == 0:
					err = fmt.Errorf("topic %s: no partitions in the metadata yet", t)
				default:
					for _, pd := range d.Partitions {
						if pd.Err != nil || pd.Leader < 0 {
							err = fmt.Errorf("topic %s partition %d: no leader yet (%v)", t, pd.Partition, pd.Err)
						}
					}
				}
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("created topics not in the metadata: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Record builds the Kafka record of e.
func Record(topic string, e *events.Event, value []byte) *kgo.Record {
	return &kgo.Record{
		Topic:   topic,
		Key:     events.Key(e.PartitionKey()),
		Value:   value,
		Headers: []kgo.RecordHeader{{Key: events.HeaderType, Value: []byte(e.Type)}},
	}
}

// Append validates e (events.Encode runs Event.Validate, which refuses
// among others the text PostgreSQL cannot store: NUL, invalid UTF-8), appends
// it and waits for the acknowledgement of all in-sync replicas. An invalid
// event is an error wrapping events.ErrInvalid and is never appended: no
// writer of the topic through this package can append a record that every
// projection attempt would refuse.
func (p *Producer) Append(ctx context.Context, e *events.Event) (Position, error) {
	value, err := events.Encode(e, p.cfg.MaxBody)
	if err != nil {
		return Position{}, err
	}
	r := Record(p.cfg.Topic, e, value)
	if err := p.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		p.noticeRecreated(err)
		return Position{}, fmt.Errorf("append %s to %s: %w", e.Type, p.cfg.Topic, err)
	}
	return Position{Partition: r.Partition, Offset: r.Offset}, nil
}

// AppendAsync validates e and appends it without waiting; done is called
// with the outcome (from the client's goroutine; it must not block).
func (p *Producer) AppendAsync(ctx context.Context, e *events.Event, done func(Position, error)) {
	value, err := events.Encode(e, p.cfg.MaxBody)
	if err != nil {
		done(Position{}, err)
		return
	}
	p.cl.Produce(ctx, Record(p.cfg.Topic, e, value), func(r *kgo.Record, err error) {
		if err != nil {
			p.noticeRecreated(err)
		}
		done(Position{Partition: r.Partition, Offset: r.Offset}, err)
	})
}

// AppendRaw appends an arbitrary value under a conversation's key: for tests
// and tools that need records no valid event would produce.
func (p *Producer) AppendRaw(ctx context.Context, conversationID int64, typ string, value []byte) error {
	r := &kgo.Record{Topic: p.cfg.Topic, Key: []byte(strconv.FormatInt(conversationID, 10)), Value: value,
		Headers: []kgo.RecordHeader{{Key: events.HeaderType, Value: []byte(typ)}}}
	return p.cl.ProduceSync(ctx, r).FirstErr()
}

// Flush waits for buffered records.
func (p *Producer) Flush(ctx context.Context) error { return p.cl.Flush(ctx) }

// noticeRecreated handles an append refused because the topic was deleted
// and created again under the same name: franz-go stops producing to a
// topic whose id changed until it is purged. The appends of the caller
// failed (a 503 for the gateway's clients, who retry); purging lets the
// next ones go to the new topic, where they wait, unprojected, until an
// operator decides what the fanout does with the new log (the fanout stops
// its partitions; docs/operations.md). Logged at most once a minute.
func (p *Producer) noticeRecreated(err error) {
	if !errors.Is(err, kerr.UnknownTopicID) {
		return
	}
	p.recreatedMu.Lock()
	defer p.recreatedMu.Unlock()
	if time.Since(p.recreatedSeen) < time.Second {
		return
	}
	first := time.Since(p.recreatedSeen) >= time.Minute
	p.recreatedSeen = time.Now()
	p.cl.PurgeTopicsFromProducing(p.cfg.Topic)
	if first {
		p.cfg.Logger.Error("the topic's id changed (deleted and created again): appends go to the new topic; the fanout stops its partitions until an operator decides (inboxd offsets)",
			"topic", p.cfg.Topic, "err", err)
	}
}
