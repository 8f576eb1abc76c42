// Package testenv assembles the real parts an integration test needs: a fresh
// migrated PostgreSQL database (pgtest), a Kafka protocol server (an
// in-process kfake cluster per test, or the brokers in INBOXD_TEST_KAFKA_BROKERS
// with a fresh topic per test), a producer, and a running fanout.
//
// With INBOXD_TEST_PG_SERVERS=N (or Options.Servers) the world is a sharded
// deployment instead (sharded.go): N databases, each a server of a
// placement kept in the first one's catalog, and StartFanout runs each
// server's conversation stage, relay and user stage.
package testenv

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/producer"
)

// EnvBrokers names the variable with external brokers for the tests.
const EnvBrokers = "INBOXD_TEST_KAFKA_BROKERS"

// Env is one test's world.
type Env struct {
	DatabaseURL string
	Pool        *pgxpool.Pool
	Brokers     []string
	Cluster     *kfake.Cluster // nil with external brokers
	Topic       string
	Partitions  int32
	Producer    *producer.Producer
	Logger      *slog.Logger
	// LargeThreshold is the fanout's (FanoutConfig); 0: the default.
	LargeThreshold int
	// Pools are the servers' databases, Pools[0] being Pool (the
	// catalog); Map places the partitions on them. One server: Pools is
	// {Pool} and Map is placement.Single().
	Pools []*pgxpool.Pool
	Map   *placement.Map
	// Deliveries is the topic between the servers' stages (sharded only).
	Deliveries string
	current    atomic.Pointer[placement.Map] // FollowPlacement's

	fanoutsMu sync.Mutex
	fanouts   []*fanout.Fanout // started by StartFanoutWith, for Poked
}

// Poked tells the fanouts this test started that it changed the
// projections by hand (fanout.Fanout.Forget): their next batches read the
// state again instead of trusting what they kept of it.
func (e *Env) Poked() {
	e.fanoutsMu.Lock()
	defer e.fanoutsMu.Unlock()
	for _, f := range e.fanouts {
		f.Forget()
	}
}

func (e *Env) started(f *fanout.Fanout) {
	e.fanoutsMu.Lock()
	e.fanouts = append(e.fanouts, f)
	e.fanoutsMu.Unlock()
}

// Options of New.
type Options struct {
	// Partitions of the topic. Default 4.
	Partitions int32
	// LargeThreshold is the member count above which the fanouts of
	// FanoutConfig switch a conversation to read fan-out; 0: the default.
	LargeThreshold int
	// Servers is the number of PostgreSQL servers (databases) of the
	// placement; 0: INBOXD_TEST_PG_SERVERS, else 1.
	Servers int
}

var topicSeq atomic.Int64

// Logger returns a logger writing to the test log at warn level (debug with
// INBOXD_TEST_VERBOSE=1).
func Logger(t testing.TB) *slog.Logger {
	lvl := slog.LevelWarn
	if os.Getenv("INBOXD_TEST_VERBOSE") != "" {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: lvl}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// New builds an Env; everything is closed at the test's end.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	return build(t, o, "")
}

// NewWithAdmin is New with the database created on the server at adminURL
// (for tests that stop and start their own PostgreSQL).
func NewWithAdmin(t testing.TB, o Options, adminURL string) *Env {
	t.Helper()
	return build(t, o, adminURL)
}

func build(t testing.TB, o Options, adminURL string) *Env {
	t.Helper()
	if o.Partitions == 0 {
		o.Partitions = 4
	}
	e := &Env{Partitions: o.Partitions, Logger: Logger(t), LargeThreshold: o.LargeThreshold}
	if adminURL == "" {
		e.Pool, e.DatabaseURL = pgtest.NewPool(t)
	} else {
		e.DatabaseURL = pgtest.NewDatabaseOn(t, adminURL)
		pool, err := pgxpool.New(context.Background(), e.DatabaseURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		e.Pool = pool
	}
	k := NewKafka(t, o.Partitions)
	e.Brokers, e.Cluster, e.Topic = k.Brokers, k.Cluster, k.Topic
	p, err := producer.New(e.ProducerConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.EnsureTopics(ctx); err != nil {
		t.Fatal(err)
	}
	e.Producer = p
	e.Pools, e.Map = []*pgxpool.Pool{e.Pool}, placement.Single()
	if n := o.servers(t); n > 1 {
		e.shard(t, n)
	}
	return e
}

// ProducerConfig is the producer configuration of this Env.
func (e *Env) ProducerConfig() producer.Config {
	return producer.Config{Brokers: e.Brokers, Topic: e.Topic, CreateTopics: true, Partitions: e.Partitions, Logger: e.Logger}
}

// FanoutConfig is the fanout configuration of this Env.
func (e *Env) FanoutConfig() fanout.Config {
	return fanout.Config{Brokers: e.Brokers, Topic: e.Topic, Group: "fanout-" + e.Topic, Logger: e.Logger,
		LargeThreshold: e.LargeThreshold}
}

// StartFanout runs an in-process fanout until the returned stop is called
// (or the test ends); on several servers, every server's stages.
func (e *Env) StartFanout(t testing.TB) (stop func()) {
	t.Helper()
	return e.StartFanoutWith(t, nil)
}

// StartFanoutWith is StartFanout with edit applied to the fanout's
// configuration (on several servers, to each conversation stage's).
func (e *Env) StartFanoutWith(t testing.TB, edit func(*fanout.Config)) (stop func()) {
	t.Helper()
	if e.Sharded() {
		stop = e.startStagesOn(t, e.Map, edit)
		t.Cleanup(stop)
		return stop
	}
	cfg := e.FanoutConfig()
	if edit != nil {
		edit(&cfg)
	}
	f, err := fanout.New(cfg, e.Pool)
	if err != nil {
		t.Fatal(err)
	}
	e.started(f)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("fanout: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// WaitCaughtUp waits until the stored offsets reach the end of every
// partition of the topic (on several servers, also the outboxes and the
// deliveries topic), or fails the test after timeout.
func (e *Env) WaitCaughtUp(t testing.TB, timeout time.Duration) {
	t.Helper()
	if e.Sharded() {
		if err := e.waitStages(context.Background(), timeout); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := WaitCaughtUp(context.Background(), e.Pool, e.Producer, timeout); err != nil {
		t.Fatal(err)
	}
}
