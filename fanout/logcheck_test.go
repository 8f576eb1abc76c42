package fanout_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/projector"
)

func fastChecks(c *fanout.Config) { c.LogCheckInterval = 200 * time.Millisecond }

// storedOffsets returns next_offset by partition, each read on its
// partition's server.
func storedOffsets(t testing.TB, env *testenv.Env) map[int32]int64 {
	t.Helper()
	out := map[int32]int64{}
	for i, pool := range env.Pools {
		rows, err := pool.Query(context.Background(), `SELECT "partition", next_offset FROM consumer_offsets WHERE topic = $1`, env.Topic)
		require.NoError(t, err)
		for rows.Next() {
			var p int32
			var n int64
			require.NoError(t, rows.Scan(&p, &n))
			if env.ServerOf(p) == i {
				out[p] = n
			}
		}
		require.NoError(t, rows.Err())
	}
	return out
}

// inspectOffsets is fanout.InspectOffsets of every server's partitions,
// each on its server: whether all are OK.
func inspectOffsets(ctx context.Context, t testing.TB, env *testenv.Env) bool {
	t.Helper()
	ok := true
	for i, srv := range env.Map.Servers {
		rep, err := fanout.InspectOffsetsOf(ctx, env.Pools[i], kadm.NewClient(env.Producer.Client()), env.Topic,
			func(p int32) bool { return env.Map.Serves(p, srv.ID) })
		require.NoError(t, err)
		ok = ok && rep.OK()
	}
	return ok
}

// resetOffsets is fanout.ResetOffsets of parts (nil: all) on every server
// holding some of them.
func resetOffsets(ctx context.Context, t testing.TB, env *testenv.Env, parts []int32, log *slog.Logger) []fanout.Reset {
	t.Helper()
	var all []fanout.Reset
	for i, srv := range env.Map.Servers {
		owns := func(p int32) bool { return env.Map.Serves(p, srv.ID) }
		var mine []int32
		for _, p := range parts {
			if owns(p) {
				mine = append(mine, p)
			}
		}
		if parts != nil && mine == nil {
			continue
		}
		resets, err := fanout.ResetOffsetsOf(ctx, env.Pools[i], kadm.NewClient(env.Producer.Client()), env.Topic, mine, "start", false, owns, log)
		require.NoError(t, err)
		all = append(all, resets...)
	}
	return all
}

func lastSeq(t testing.TB, env *testenv.Env, conv int64) int64 {
	t.Helper()
	var n int64
	err := env.ConvPool(conv).QueryRow(context.Background(), `SELECT last_seq FROM conversations WHERE id = $1`, conv).Scan(&n)
	if err != nil {
		return 0
	}
	return n
}

func createConv(t testing.TB, env *testenv.Env, conv int64) {
	t.Helper()
	e := events.New(events.ConversationCreated, conv, 1)
	e.Members = []int64{2}
	_, err := env.Producer.Append(testenv.Ctx(t, time.Minute), e)
	require.NoError(t, err)
}

func sendN(t testing.TB, env *testenv.Env, conv int64, n int) {
	t.Helper()
	evs := make([]*events.Event, n)
	for i := range evs {
		evs[i] = sendEvent(t, conv, 1, "m")
	}
	appendEvents(t, env.Producer, evs, false)
}

// recreateTopic deletes the topic and creates it again, empty.
func recreateTopic(t testing.TB, env *testenv.Env) {
	t.Helper()
	ctx := testenv.Ctx(t, time.Minute)
	adm := kadm.NewClient(env.Producer.Client())
	_, err := adm.DeleteTopic(ctx, env.Topic)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		resp, err := adm.CreateTopic(ctx, env.Partitions, 1, nil, env.Topic)
		return err == nil && resp.Err == nil
	}, 30*time.Second, 200*time.Millisecond, "create the topic again")
	// The producer learns the new topic id from its next metadata refresh;
	// until then an append fails (the gateway answers 503, retryable).
	require.Eventually(t, func() bool {
		e := events.New(events.ConversationCreated, 999, 1)
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := env.Producer.Append(actx, e)
		return err == nil
	}, time.Minute, 200*time.Millisecond, "appending to the new topic")
}

func waitStopped(t testing.TB, o *observedFanout, reasons ...string) *fanout.StoppedError {
	t.Helper()
	var st *fanout.StoppedError
	require.Eventually(t, func() bool {
		s, ok := o.Ready().(*fanout.StoppedError)
		if !ok {
			return false
		}
		for _, p := range s.Partitions {
			for _, r := range reasons {
				if p.Reason == r {
					st = s
					return true
				}
			}
		}
		return false
	}, time.Minute, 20*time.Millisecond, "a partition stopped for one of %v", reasons)
	return st
}

func skippedTotal(t testing.TB, o *observedFanout) float64 {
	t.Helper()
	v, _ := o.counter(t, "inboxd_fanout_records_skipped_total")
	return v
}

// The topic is deleted and created again under a running fanout (the
// broker's data lost): the stored offsets are beyond the new log's end.
// The fanout stops those partitions, says why in Ready and the log, skips
// no record of the new log, and after the documented recovery (an explicit
// reset to the start of the log) projects everything sent since, on top of
// the projections it kept. A partition nothing was ever applied from has
// no offsets to contradict the new log: it takes the new log at once (its
// fanout starts a new Kafka client, since franz-go does not consume a
// recreated topic in the same one).
func TestTopicRecreatedUnderARunningFanout(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 2})
	ctx := testenv.Ctx(t, 3*time.Minute)
	// kept shares conversation 1's partition; fresh is in the other one,
	// which gets no record before the topic is recreated.
	kept, fresh := int64(2), int64(2)
	for placement.OfConversation(kept, env.Partitions) != placement.OfConversation(1, env.Partitions) {
		kept++
	}
	for placement.OfConversation(fresh, env.Partitions) == placement.OfConversation(1, env.Partitions) || fresh == 999 {
		fresh++
	}
	o := startObservedFanout(t, env, fastChecks)
	createConv(t, env, 1)
	sendN(t, env, 1, 30)
	env.WaitCaughtUp(t, time.Minute)
	require.EqualValues(t, 31, lastSeq(t, env, 1))
	before := storedOffsets(t, env)
	require.Len(t, before, 1, "offsets stored for conversation 1's partition only")

	recreateTopic(t, env)
	// The new log is shorter than what was applied: 2 + 5 records.
	createConv(t, env, kept)
	sendN(t, env, kept, 5)
	createConv(t, env, fresh)
	sendN(t, env, fresh, 2)
	st := waitStopped(t, o, fanout.StopOffsetBeyondEnd, fanout.StopTopicRecreated)
	require.NotEmpty(t, st.Partitions[0].Detail)
	require.Contains(t, o.log.String(), `"level":"ERROR","msg":"partition stopped`)
	require.Eventually(t, func() bool { return lastSeq(t, env, fresh) == 3 }, time.Minute, 50*time.Millisecond,
		"the partition with no stored offsets projects the new log without an operator")
	time.Sleep(time.Second) // long enough for a fetch to have been applied
	p1 := placement.OfConversation(1, env.Partitions)
	require.Equal(t, before[p1], storedOffsets(t, env)[p1], "the stopped partition's offset did not move: nothing of the new log was taken for applied")
	require.Zero(t, skippedTotal(t, o), "no record skipped")
	require.Zero(t, lastSeq(t, env, kept), "the new conversation of the stopped partition waits")

	require.False(t, inspectOffsets(ctx, t, env))
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	resets := resetOffsets(ctx, t, env, nil, log)
	require.Len(t, resets, 1, "only the stopped partition needs the operator")
	require.Eventually(t, func() bool { return lastSeq(t, env, kept) == 6 }, time.Minute, 50*time.Millisecond,
		"every record of the new log projected after the reset")
	sendN(t, env, 1, 3)
	sendN(t, env, kept, 3)
	env.WaitCaughtUp(t, time.Minute)
	require.EqualValues(t, 34, lastSeq(t, env, 1), "the kept conversation continues its seqs")
	require.EqualValues(t, 9, lastSeq(t, env, kept))
	require.EqualValues(t, 3, lastSeq(t, env, fresh))
	require.NoError(t, o.Ready())
	require.Zero(t, skippedTotal(t, o))
	env.Verify(t)
}

// The topic is recreated while no fanout runs and its new log grows past
// the stored offsets, so only the topic id tells: a fanout starting on it
// stops the partitions at assignment instead of resuming in the middle of
// the new log.
func TestTopicRecreatedWhileStoppedIsCaughtByItsID(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 1})
	ctx := testenv.Ctx(t, 3*time.Minute)
	stop := env.StartFanout(t)
	createConv(t, env, 1)
	sendN(t, env, 1, 5)
	env.WaitCaughtUp(t, time.Minute)
	time.Sleep(6 * time.Second) // a log check stores the topic id
	stop()
	var id *string
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT topic_id::text FROM consumer_offsets WHERE topic = $1`, env.Topic).Scan(&id))
	require.NotNil(t, id, "the fanout stored the topic id beside the offsets")

	recreateTopic(t, env)
	createConv(t, env, 2)
	sendN(t, env, 2, 20) // past the 6 stored offsets
	o := startObservedFanout(t, env, fastChecks)
	waitStopped(t, o, fanout.StopTopicRecreated)
	time.Sleep(time.Second)
	require.Zero(t, lastSeq(t, env, 2), "nothing of the new log applied from the old position")
	require.EqualValues(t, 6, storedOffsets(t, env)[0])

	_, err := fanout.ResetOffsets(ctx, env.Pool, kadm.NewClient(env.Producer.Client()), env.Topic, nil, "start", false, slog.Default())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return lastSeq(t, env, 2) == 21 }, time.Minute, 50*time.Millisecond)
	require.EqualValues(t, 1, lastSeq(t, env, 999))
	require.NoError(t, o.Ready())
}

// Records are deleted from the log past the stored offsets before they
// were projected (retention, or kafka-delete-records): a fanout starting
// on it stops the partition (log_truncated) rather than starting where
// the log now begins; resetting to the log's start is the operator's
// explicit choice.
func TestLogTruncatedPastTheStoredOffsets(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 1})
	ctx := testenv.Ctx(t, 3*time.Minute)
	stop := env.StartFanout(t)
	createConv(t, env, 1)
	sendN(t, env, 1, 4)
	env.WaitCaughtUp(t, time.Minute)
	stop()
	require.EqualValues(t, 5, storedOffsets(t, env)[0])
	sendN(t, env, 1, 10) // offsets 5..14, never projected
	adm := kadm.NewClient(env.Producer.Client())
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: env.Topic, Partition: 0, At: 10})
	resp, err := adm.DeleteRecords(ctx, offs)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	o := startObservedFanout(t, env, fastChecks)
	st := waitStopped(t, o, fanout.StopLogTruncated)
	require.Contains(t, st.Error(), "records 5..9 were deleted")
	time.Sleep(time.Second)
	require.EqualValues(t, 5, lastSeq(t, env, 1), "nothing applied past the hole")
	require.EqualValues(t, 5, storedOffsets(t, env)[0])

	_, err = fanout.ResetOffsets(ctx, env.Pool, adm, env.Topic, []int32{0}, "start", false, slog.Default())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return lastSeq(t, env, 1) == 10 }, time.Minute, 50*time.Millisecond,
		"the records the log still has (10..14) projected after the reset")
	sendN(t, env, 1, 2)
	env.WaitCaughtUp(t, time.Minute)
	require.EqualValues(t, 12, lastSeq(t, env, 1))
	vr, err := projector.Verify(ctx, env.Pool)
	require.NoError(t, err)
	require.True(t, vr.OK(), vr.String())

	// A healthy partition is not reset without force.
	_, err = fanout.ResetOffsets(ctx, env.Pool, adm, env.Topic, []int32{0}, "start", false, slog.Default())
	require.ErrorIs(t, err, fanout.ErrHealthy)
}
