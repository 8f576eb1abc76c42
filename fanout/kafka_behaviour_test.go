package fanout_test

// Behaviour the exactly-once projection relies on, pinned on kfake and on a
// real Kafka broker alike (scripts/test-kafka.sh runs this package against
// Apache Kafka).

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/producer"
)

// The fanout starts each partition at the offset stored in PostgreSQL
// beside the projections, whatever the consumer group has committed in
// Kafka: here the group's offsets claim the whole log was consumed while
// half of it never was projected.
func TestResumesFromStoredOffsetsNotGroupOffsets(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 4})
	g := workload.New(workload.Config{Seed: 21, Users: 300, Conversations: 60})
	evs := generate(g, 3000)
	stop := env.StartFanout(t)
	appendEvents(t, env.Producer, evs[:1500], false)
	waitCaughtUp(t, env)
	stop()

	appendEvents(t, env.Producer, evs[1500:], false)
	ctx := testenv.Ctx(t, time.Minute)
	adm := kadm.NewClient(env.Producer.Client())
	ends, err := adm.ListEndOffsets(ctx, env.Topic)
	require.NoError(t, err)
	for _, group := range env.FanoutGroups() {
		committed, err := adm.CommitOffsets(ctx, group, ends.Offsets())
		require.NoError(t, err)
		require.NoError(t, committed.Error())
		fetched, err := adm.FetchOffsets(ctx, group)
		require.NoError(t, err)
		ends.Each(func(o kadm.ListedOffset) {
			got, ok := fetched.Lookup(env.Topic, o.Partition)
			require.True(t, ok, "partition %d committed", o.Partition)
			require.Equal(t, o.Offset, got.At, "partition %d committed at its end", o.Partition)
		})
	}

	env.StartFanout(t)
	waitCaughtUp(t, env)
	assertOutcome(t, env, g)
}

// Responses to the producer's requests are lost on the network after the
// broker appended (the client retries what the log has): the log holds
// each event once and the projections are exact.
func TestLostProduceResponsesProjectOnce(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 4})
	dial := testenv.NewFlakyDialer(0.2, 5)
	cfg := env.ProducerConfig()
	cfg.Dialer = dial.DialContext
	flaky, err := producer.New(cfg)
	require.NoError(t, err)
	t.Cleanup(flaky.Close)
	env.StartFanout(t)
	g := workload.New(workload.Config{Seed: 22, Users: 300, Conversations: 60})
	evs := generate(g, 3000)
	for i := 0; i < len(evs); i += 75 {
		appendEvents(t, flaky, evs[i:i+75], false)
	}
	require.Greater(t, dial.Cuts(), int64(2), "responses were lost and requests retried")
	t.Logf("%d connections cut after a produce request", dial.Cuts())

	ctx := testenv.Ctx(t, time.Minute)
	ends, err := kadm.NewClient(env.Producer.Client()).ListEndOffsets(ctx, env.Topic)
	require.NoError(t, err)
	var records int64
	ends.Each(func(o kadm.ListedOffset) { records += o.Offset })
	require.Equal(t, int64(len(evs)), records, "each event in the log once")
	waitCaughtUp(t, env)
	assertOutcome(t, env, g)
}
