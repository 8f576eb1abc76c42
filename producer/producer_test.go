package producer_test

// These tests pin what the exactly-once story takes from Kafka, on kfake
// and on a real broker alike (scripts/test-kafka.sh runs them against
// Apache Kafka): where a key lands, what a created topic keeps, and that a
// produce retried after a lost response is in the log once.

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/producer"
)

func newProducer(t *testing.T, partitions int32, dial func(context.Context, string, string) (net.Conn, error)) (*producer.Producer, *testenv.Kafka) {
	t.Helper()
	k := testenv.NewKafka(t, partitions)
	p, err := producer.New(producer.Config{Brokers: k.Brokers, Topic: k.Topic, CreateTopics: true,
		Partitions: partitions, Logger: testenv.Logger(t), Dialer: dial})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	require.NoError(t, p.EnsureTopics(testenv.Ctx(t, time.Minute)))
	return p, k
}

// readAll consumes topic from its start up to its end offsets.
func readAll(t *testing.T, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	ctx := testenv.Ctx(t, 2*time.Minute)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	var recs []*kgo.Record
	for int64(len(recs)) < want {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d records", len(recs), want)
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
	}
	return recs
}

// murmur2Partition is the partition the Java producer's default
// partitioner picks for a key: toPositive(Utils.murmur2(key)) % n.
func murmur2Partition(key []byte, n int32) int32 {
	const seed, m, r = uint32(0x9747b28c), uint32(0x5bd1e995), 24
	h := seed ^ uint32(len(key))
	i := 0
	for ; len(key)-i >= 4; i += 4 {
		k := uint32(key[i]) | uint32(key[i+1])<<8 | uint32(key[i+2])<<16 | uint32(key[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(key) - i {
	case 3:
		h ^= uint32(key[i+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(key[i+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(key[i])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h&0x7fffffff) % n
}

// A conversation's events all go to one partition, the one Kafka's own
// (Java) producer would pick for the key, so that any client appending to
// the topic keeps a conversation totally ordered.
func TestKeyPartitionIsKafkasMurmur2(t *testing.T) {
	const parts = 12
	// Computed with org.apache.kafka.common.utils.Utils of kafka-clients
	// 4.1.1: toPositive(murmur2(Long.toString(id).getBytes())) % 12.
	golden := map[int64]int32{0: 8, 1: 3, 2: 8, 3: 11, 7: 3, 42: 4, 100: 9, 999: 3, 1000: 10,
		123456789: 6, -5: 3, 9223372036854775807: 9}
	for id, want := range golden {
		require.Equal(t, want, murmur2Partition(events.Key(id), parts), "murmur2 of conversation %d", id)
	}

	p, k := newProducer(t, parts, nil)
	ctx := testenv.Ctx(t, time.Minute)
	for id, want := range golden {
		if id <= 0 {
			continue // not a valid conversation id; the hash is pinned all the same
		}
		pos, err := p.Append(ctx, message(id, 0))
		require.NoError(t, err)
		require.Equal(t, want, pos.Partition, "conversation %d", id)
	}
	// Interleaved asynchronous appends of 300 conversations: keyed records
	// must not stick to the partition of the batch being built.
	var wg sync.WaitGroup
	var mu sync.Mutex
	landed := map[int64]map[int32]bool{}
	var firstErr error
	for round := 1; round <= 3; round++ {
		for id := int64(1); id <= 300; id++ {
			wg.Add(1)
			p.AppendAsync(ctx, message(id, round), func(pos producer.Position, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					firstErr = err
					return
				}
				if landed[id] == nil {
					landed[id] = map[int32]bool{}
				}
				landed[id][pos.Partition] = true
			})
		}
	}
	wg.Wait()
	require.NoError(t, firstErr)
	used := map[int32]bool{}
	for id, ps := range landed {
		require.Len(t, ps, 1, "conversation %d in one partition", id)
		for pt := range ps {
			require.Equal(t, murmur2Partition(events.Key(id), parts), pt, "conversation %d", id)
			used[pt] = true
		}
	}
	require.Len(t, used, parts, "300 conversations spread over every partition")
	// And that is where the broker keeps them.
	recs := readAll(t, k.Brokers, k.Topic)
	require.Len(t, recs, len(golden)-2+900)
	for _, r := range recs {
		id, err := strconv.ParseInt(string(r.Key), 10, 64)
		require.NoError(t, err)
		require.Equal(t, murmur2Partition(r.Key, parts), r.Partition, "stored record of conversation %d", id)
	}
}

// The event topic and the DLQ are created with the partitions asked for
// and kept forever (the log is the source of truth); ensuring them again
// is a no-op.
func TestEnsureTopicsKeepsForever(t *testing.T) {
	p, k := newProducer(t, 6, nil)
	ctx := testenv.Ctx(t, time.Minute)
	require.NoError(t, p.EnsureTopics(ctx), "again: the topics exist")
	adm := kadm.NewClient(p.Client())
	details, err := adm.ListTopics(ctx, k.Topic, p.DLQTopic())
	require.NoError(t, err)
	for _, name := range []string{k.Topic, p.DLQTopic()} {
		d, ok := details[name]
		require.True(t, ok, "topic %s exists", name)
		require.NoError(t, d.Err)
		require.Len(t, d.Partitions, 6, "partitions of %s", name)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, k.Topic, p.DLQTopic())
	require.NoError(t, err)
	require.Len(t, rcs, 2)
	for _, rc := range rcs {
		require.NoError(t, rc.Err, rc.Name)
		got := map[string]string{}
		for _, c := range rc.Configs {
			if c.Value != nil {
				got[c.Key] = *c.Value
			}
		}
		require.Equal(t, "-1", got["retention.ms"], "retention.ms of %s", rc.Name)
		require.Equal(t, "-1", got["retention.bytes"], "retention.bytes of %s", rc.Name)
	}
}

// Responses to produce requests are lost on the network (the broker did
// append), so the client retries batches the log already has: the
// idempotent producer's sequence numbers make the broker drop them, and
// every event is in the log once and in its conversation's order.
func TestLostProduceResponsesDoNotDuplicate(t *testing.T) {
	dial := testenv.NewFlakyDialer(0.15, 11)
	p, k := newProducer(t, 4, dial.DialContext)
	ctx := testenv.Ctx(t, 2*time.Minute)
	const convs, per = 40, 60
	var wg sync.WaitGroup
	errs := make(chan error, convs*per)
	for i := 0; i < per; i++ {
		for c := int64(1); c <= convs; c++ {
			wg.Add(1)
			p.AppendAsync(ctx, message(c, i), func(_ producer.Position, err error) {
				if err != nil {
					errs <- err
				}
				wg.Done()
			})
		}
		// A produce request (or a few) per round, so that cuts hit many.
		require.NoError(t, p.Flush(ctx))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Greater(t, dial.Cuts(), int64(3), "responses were lost and requests retried")
	t.Logf("%d connections cut after a produce request", dial.Cuts())

	recs := readAll(t, k.Brokers, k.Topic)
	seen := map[string]bool{}
	next := map[int64]int{}
	for _, r := range recs {
		e, err := events.Decode(r.Value, events.DefaultMaxBody)
		require.NoError(t, err)
		require.False(t, seen[e.EventID], "event %s (conversation %d, #%s) appended twice at offset %d",
			e.EventID, e.ConversationID, *e.Body, r.Offset)
		seen[e.EventID] = true
		require.Equal(t, strconv.Itoa(next[e.ConversationID]), *e.Body, "conversation %d in order", e.ConversationID)
		next[e.ConversationID]++
	}
	require.Len(t, recs, convs*per)
}

// message is conversation c's n-th message with body n.
func message(c int64, n int) *events.Event {
	e := events.New(events.MessageSent, c, 1)
	e.MsgID = uuid.NewString()
	e.Body = events.Ptr(fmt.Sprint(n))
	return e
}

// TestAppendRefusesUnstorableText: an event the projector could never store
// (NUL or invalid UTF-8 in its title or body) is refused by Append and
// AppendAsync with events.ErrInvalid, and nothing reaches the topic; a
// valid event after them is the only record.
func TestAppendRefusesUnstorableText(t *testing.T) {
	p, k := newProducer(t, 3, nil)
	ctx := testenv.Ctx(t, time.Minute)
	nul := message(1, 0)
	nul.Body = events.Ptr("nul \x00 byte")
	badUTF8 := message(2, 0)
	badUTF8.Body = events.Ptr("bad \xff byte")
	title := events.New(events.ConversationCreated, 3, 1)
	title.Title = "t\x00"
	for _, e := range []*events.Event{nul, badUTF8, title} {
		_, err := p.Append(ctx, e)
		require.ErrorIs(t, err, events.ErrInvalid, "%s", e.Type)
		done := make(chan error, 1)
		p.AppendAsync(ctx, e, func(_ producer.Position, err error) { done <- err })
		require.ErrorIs(t, <-done, events.ErrInvalid, "%s async", e.Type)
	}
	good := message(4, 0)
	_, err := p.Append(ctx, good)
	require.NoError(t, err)
	recs := readAll(t, k.Brokers, k.Topic)
	require.Len(t, recs, 1)
	back, err := events.Decode(recs[0].Value, 0)
	require.NoError(t, err)
	require.Equal(t, good.EventID, back.EventID)
}
