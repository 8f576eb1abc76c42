package testenv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka is the Kafka part of an Env alone, for tests without PostgreSQL:
// an in-process kfake cluster, or the brokers of INBOXD_TEST_KAFKA_BROKERS,
// and a topic name nobody used yet.
type Kafka struct {
	Brokers []string
	Cluster *kfake.Cluster // nil with external brokers
	Topic   string
}

// NewKafka returns the Kafka of a test; a kfake cluster (with partitions
// as its default for created topics) is closed at the test's end.
func NewKafka(t testing.TB, partitions int32) *Kafka {
	t.Helper()
	k := &Kafka{Topic: "inboxd.events"}
	if b := os.Getenv(EnvBrokers); b != "" {
		k.Brokers = strings.Split(b, ",")
		k.Topic = fmt.Sprintf("inboxd.test.%d.%d.%d", os.Getpid(), time.Now().UnixNano()%1e9, topicSeq.Add(1))
		return k
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(int(partitions)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	k.Cluster = c
	k.Brokers = c.ListenAddrs()
	return k
}

// FlakyDialer dials real connections that now and then lose the responses
// to produce requests the broker did get: after such a request is written,
// the connection is cut at its next read, so the client does not learn the
// outcome and retries a request the broker already appended. It is network
// fault injection in front of a real broker (kfake or Kafka), not a mock.
type FlakyDialer struct {
	// Probability that a produce request's response is lost.
	Probability float64

	mu   sync.Mutex
	rnd  *rand.Rand
	cuts atomic.Int64
}

// NewFlakyDialer returns a dialer cutting after a produce request with
// probability p, with a fixed seed.
func NewFlakyDialer(p float64, seed uint64) *FlakyDialer {
	return &FlakyDialer{Probability: p, rnd: rand.New(rand.NewPCG(seed, seed))}
}

// Cuts is how many connections were cut after a produce request.
func (d *FlakyDialer) Cuts() int64 { return d.cuts.Load() }

// DialContext is a kgo.Dialer.
func (d *FlakyDialer) DialContext(ctx context.Context, network, host string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return &flakyConn{Conn: c, d: d}, nil
}

func (d *FlakyDialer) roll() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rnd.Float64() < d.Probability
}

var errCut = errors.New("testenv: connection cut after a produce request (injected)")

type flakyConn struct {
	net.Conn
	d      *FlakyDialer
	doomed atomic.Bool
}

// produceKey is the API key of Produce requests.
const produceKey = 0

func (c *flakyConn) Write(b []byte) (int, error) {
	// A request starts with its int32 size and int16 API key; franz-go
	// writes each request with one Write.
	if len(b) >= 6 && int16(binary.BigEndian.Uint16(b[4:6])) == produceKey && !c.doomed.Load() && c.d.roll() {
		// Doomed before the request leaves, so that no response to it can
		// be read before the cut.
		c.doomed.Store(true)
		c.d.cuts.Add(1)
	}
	return c.Conn.Write(b)
}

func (c *flakyConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.doomed.Load() {
		// Bytes of a response have come, so the broker handled the
		// request (it handles one connection's requests in order): drop
		// them and cut.
		_ = c.Conn.Close()
		return 0, errCut
	}
	return n, err
}
