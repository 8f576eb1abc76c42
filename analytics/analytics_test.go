package analytics_test

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inboxd/inboxd/analytics"
	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/projection"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Analytics and fanout consume the same log side by side: fanout's
// progress (in PostgreSQL) reaches the end of the log untouched, and the
// figures are exactly what the generated events say.
func TestBesideFanout(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 8})
	env.StartFanout(t)
	g := workload.New(workload.Config{Seed: 11, Users: 300, Conversations: 150, EditPct: 3, DeletePct: 2, ReactPct: 5, UnreactPct: 2})
	evs, fans := generate(g, 4000)
	want := expectOf(evs, fans)
	require.Equal(t, int64(g.Sends+g.Rejected), want.messages)
	require.Equal(t, int64(g.Rejected), want.nonMember)

	reg := prometheus.NewRegistry()
	group := "analytics-" + env.Topic
	a, stop := start(t, env, group, reg, time.Now())
	for i := 0; i < len(evs); i += 1000 {
		appendEvents(t, env.Producer, evs[i:min(i+1000, len(evs))])
	}
	// Poison fanout dead-letters: analytics counts the first as an invalid
	// message, the others by their header alone, undecoded.
	ctx := testenv.Ctx(t, time.Minute)
	require.NoError(t, env.Producer.AppendRaw(ctx, 1, events.MessageSent, []byte("{{{ not json")))
	require.NoError(t, env.Producer.AppendRaw(ctx, 1, events.ReadUpdated, []byte("not json either")))
	require.NoError(t, env.Producer.AppendRaw(ctx, 1, "message.vanished", []byte("{}")))
	want.records += 3
	want.invalid = 1
	want.events[events.MessageSent]++
	want.events[events.ReadUpdated]++
	want.events[analytics.TypeUnknown]++

	env.WaitCaughtUp(t, 2*time.Minute)
	ends := endOffsets(t, env)
	got := waitCaughtUp(t, a, ends)
	assertFigures(t, want, got)
	require.Equal(t, want.messages, got.WindowMessages, "every message is inside the window")
	require.Equal(t, len(want.convs), got.ActiveConversations)
	require.Equal(t, 150, got.Conversations)
	require.Equal(t, float64(want.messages), metric(t, reg, "inboxd_analytics_messages_total", nil))
	require.Equal(t, float64(want.events[events.MemberAdded]), metric(t, reg, "inboxd_analytics_events_total", map[string]string{"type": events.MemberAdded}))
	for _, typ := range []string{events.MessageEdited, events.MessageDeleted, events.ReactionAdded, events.ReactionRemoved} {
		require.Positive(t, want.events[typ], "the workload has %s", typ)
		require.Equal(t, float64(want.events[typ]), metric(t, reg, "inboxd_analytics_events_total", map[string]string{"type": typ}), typ)
	}
	require.Equal(t, float64(want.messages), metric(t, reg, "inboxd_analytics_fanout_size", nil))
	require.Equal(t, float64(want.top[0].Messages), metric(t, reg, "inboxd_analytics_top_sender_messages", map[string]string{"rank": "1"}))

	stop()
	require.Equal(t, ends, fanoutOffsets(t, env), "fanout's stored offsets are the end of the log")
	require.Equal(t, ends, groupOffsets(t, env, group), "analytics committed what it counted, to its own group")
	// Fanout commits its applied offsets to its own group for lag tooling:
	// never beyond what it stored in PostgreSQL.
	stored := fanoutOffsets(t, env)
	for p, o := range groupOffsets(t, env, env.FanoutConfig().Group) {
		require.LessOrEqual(t, o, stored[p], "fanout's group commit of partition %d", p)
	}
}

// An analytics group started after fanout finished reads from the start; a
// restart in the same group counts only what came after its commits, with
// membership (fan-out sizes) and the window rebuilt from the replay.
func TestRestartResumesFromCommit(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 4})
	stopFanout := env.StartFanout(t)
	g := workload.New(workload.Config{Seed: 12, Users: 200, Conversations: 100})
	evs1, fans1 := generate(g, 2000)
	evs2, fans2 := generate(g, 1500)
	now := time.Now()
	appendEvents(t, env.Producer, evs1)
	env.WaitCaughtUp(t, 2*time.Minute)
	stopFanout()
	ends1 := endOffsets(t, env)
	fanoutBefore := fanoutOffsets(t, env)
	require.Equal(t, ends1, fanoutBefore)

	group := "analytics-" + env.Topic
	want1 := expectOf(evs1, fans1)
	a, stop := start(t, env, group, prometheus.NewRegistry(), now)
	got := waitCaughtUp(t, a, ends1)
	assertFigures(t, want1, got)
	require.Equal(t, int64(0), got.Replayed)
	stop()
	require.Equal(t, ends1, groupOffsets(t, env, group))

	appendEvents(t, env.Producer, evs2)
	ends2 := endOffsets(t, env)
	want2 := expectOf(evs2, fans2)
	a, stop = start(t, env, group, prometheus.NewRegistry(), now)
	got = waitCaughtUp(t, a, ends2)
	assertFigures(t, want2, got)
	require.Equal(t, int64(len(evs1)), got.Replayed)
	require.Equal(t, want1.messages+want2.messages, got.WindowMessages, "the window covers replayed messages")
	require.Equal(t, len(union(want1.convs, want2.convs)), got.ActiveConversations)
	require.Equal(t, 100, got.Conversations)
	stop()
	require.Equal(t, ends2, groupOffsets(t, env, group))

	// A new group counts the whole log.
	a, _ = start(t, env, group+"-new", prometheus.NewRegistry(), now)
	got = waitCaughtUp(t, a, ends2)
	require.Equal(t, int64(len(evs1)+len(evs2)), got.Records)
	require.Equal(t, int64(g.Sends+g.Rejected), got.Messages)
	require.Equal(t, int64(g.Rejected), got.NonMemberMessages)

	require.Equal(t, fanoutBefore, fanoutOffsets(t, env), "analytics never moves fanout's offsets")
}

// Two members of one analytics group, one joining and the other leaving
// mid-stream: each record is counted by exactly one of them, and each
// message with its right fan-out, whoever held the partition before.
func TestGroupMembersSumExactly(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 6})
	g := workload.New(workload.Config{Seed: 13, Users: 200, Conversations: 100})
	evs, fans := generate(g, 4000)
	want := expectOf(evs, fans)
	group := "analytics-" + env.Topic
	now := time.Now()

	a, stopA := start(t, env, group, prometheus.NewRegistry(), now)
	appendEvents(t, env.Producer, evs[:1500])
	waitCaughtUp(t, a, endOffsets(t, env))
	b, _ := start(t, env, group, prometheus.NewRegistry(), now)
	testenv.WaitFor(t, 2*time.Minute, "b is assigned partitions", func() bool { return len(b.Snapshot().Positions) > 0 })
	appendEvents(t, env.Producer, evs[1500:3000])
	ends := endOffsets(t, env)
	testenv.WaitFor(t, 2*time.Minute, "a caught up on the partitions it kept", func() bool {
		for p, pos := range a.Snapshot().Positions {
			if pos < ends[p] {
				return false
			}
		}
		return true
	})
	stopA()
	appendEvents(t, env.Producer, evs[3000:])
	ends = endOffsets(t, env)
	gotB := waitCaughtUp(t, b, ends)
	gotA := a.Snapshot()

	require.Equal(t, want.records, gotA.Records+gotB.Records)
	require.Equal(t, want.messages, gotA.Messages+gotB.Messages)
	require.Equal(t, want.nonMember, gotA.NonMemberMessages+gotB.NonMemberMessages)
	var sum int64
	for _, n := range want.fanOut {
		sum += int64(n)
	}
	require.Equal(t, sum, gotA.FanOut.Sum+gotB.FanOut.Sum)
	for typ, n := range want.events {
		require.Equal(t, n, gotA.Events[typ]+gotB.Events[typ], typ)
	}
	require.Greater(t, gotA.Records, int64(1500), "a counted records after b joined")
	require.Greater(t, gotB.Records, int64(1000), "b counted records before a left")
	require.Equal(t, 100, gotB.Conversations, "b holds every partition at the end")
	t.Logf("a counted %d records, b %d (b replayed %d)", gotA.Records, gotB.Records, gotB.Replayed)
}

// Roles, bans and mutes at random, by members, outsiders and a service,
// beside fanout: analytics' fan-out of every message is the inbox rows
// the projection wrote for it (0 for a send it refused), and what it
// counts apart as non-members' and muted members' sends is what the
// projection refused as not_member or no_conversation, and as muted.
func TestModerationAgreesWithProjection(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 4})
	env.StartFanout(t)
	evs := moderationEvents(21, 12, 14, 3000, time.Now().Add(-time.Hour).Truncate(time.Second))
	appendEvents(t, env.Producer, evs)
	env.WaitCaughtUp(t, 2*time.Minute)

	ctx := testenv.Ctx(t, time.Minute)
	inboxRows := map[string]int{}
	rows, err := env.Pool.Query(ctx, `SELECT m.msg_id::text, count(i.user_id) FROM messages m
LEFT JOIN inbox i ON i.conversation_id = m.conversation_id AND i.seq = m.seq AND i.kind = 1
WHERE m.kind = 'text' GROUP BY m.msg_id`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		inboxRows[id] = n
	}
	require.NoError(t, rows.Err())
	fans := make([]int, len(evs))
	for i, e := range evs {
		fans[i] = -1
		if e.Type == events.MessageSent {
			fans[i] = inboxRows[e.MsgID] // 0: refused
		}
	}
	want := expectOf(evs, fans)
	refused := func(typ string, reasons ...string) int64 {
		var n int64
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM rejections WHERE event_type = $1 AND reason = ANY($2)`,
			typ, reasons).Scan(&n))
		return n
	}
	want.nonMember = refused(events.MessageSent, projection.ReasonNotMember, projection.ReasonNoConversation)
	muted := refused(events.MessageSent, projection.ReasonMuted)
	require.Equal(t, want.messages-int64(len(inboxRows)), want.nonMember+muted, "every send the projection refused is a non-member's or a muted member's")
	// The workload exercises what it is for.
	require.Positive(t, muted, "muted members' sends")
	require.Positive(t, refused(events.MemberAdded, projection.ReasonBanned), "adds of banned users")
	require.Positive(t, refused(events.MemberBanned, projection.ReasonRole), "bans refused by role")
	var removedByBan int64
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE kind = 'system' AND body::jsonb->>'event' = $1
AND EXISTS (SELECT 1 FROM inbox i WHERE i.conversation_id = messages.conversation_id AND i.seq = messages.seq
AND i.user_id = (body::jsonb->>'user_id')::bigint)`, events.MemberBanned).Scan(&removedByBan))
	require.Positive(t, removedByBan, "bans of members")

	a, _ := start(t, env, "analytics-"+env.Topic, prometheus.NewRegistry(), time.Now())
	got := waitCaughtUp(t, a, endOffsets(t, env))
	assertFigures(t, want, got)
	require.Equal(t, muted, got.MutedMessages, "muted members' sends")
	require.Equal(t, 12, got.Conversations)
	for _, typ := range []string{events.MemberRoleSet, events.MemberBanned, events.MemberUnbanned, events.MemberMuted, events.MemberUnmuted} {
		require.Positive(t, got.Events[typ], "%s counted by its type", typ)
	}
	t.Logf("%d messages: %d refused as non-members', %d as muted members'; %d bans of members", got.Messages,
		got.NonMemberMessages, got.MutedMessages, removedByBan)
}

// moderationEvents makes n events in convs conversations among users
// 1..users, one second apart from base: after the creations, sends (by
// anyone, so some are refused), adds and removals, roles, bans and mutes
// (some lapsing a few seconds later) and their lifts, by members,
// outsiders and now and then a service. The projection judges them; the
// generator keeps no model of its own.
func moderationEvents(seed uint64, convs, users, n int, base time.Time) []*events.Event {
	rnd := rand.New(rand.NewPCG(seed, 3))
	user := func() int64 { return int64(1 + rnd.IntN(users)) }
	var evs []*events.Event
	next := func(typ string, conv int64) *events.Event {
		e := events.New(typ, conv, user())
		e.At = base.Add(time.Duration(len(evs)) * time.Second)
		if rnd.IntN(10) == 0 && events.ServiceMayAct(typ) {
			e.ActorID, e.Service = 0, "moderation-bot"
		}
		evs = append(evs, e)
		return e
	}
	for c := 1; c <= convs; c++ {
		e := next(events.ConversationCreated, int64(c))
		e.ActorID, e.Service = user(), ""
		e.Roles = c%2 == 0
		for range 3 + rnd.IntN(4) {
			e.Members = append(e.Members, user())
		}
	}
	for len(evs) < n {
		conv := int64(1 + rnd.IntN(convs))
		switch k := rnd.IntN(100); {
		case k < 50:
			e := next(events.MessageSent, conv)
			e.MsgID, e.Body = uuid.NewString(), events.Ptr("hi")
			if e.ActorID == 0 {
				e.SenderName = "Bot"
			}
		case k < 62:
			next(events.MemberAdded, conv).UserID = user()
		case k < 68:
			next(events.MemberRemoved, conv).UserID = user()
		case k < 76:
			e := next(events.MemberRoleSet, conv)
			e.UserID, e.Role = user(), events.Roles[rnd.IntN(len(events.Roles))]
		default:
			typ := []string{events.MemberBanned, events.MemberUnbanned, events.MemberMuted, events.MemberUnmuted}[rnd.IntN(4)]
			e := next(typ, conv)
			e.UserID = user()
			if (typ == events.MemberBanned || typ == events.MemberMuted) && rnd.IntN(2) == 0 {
				e.Until = events.Ptr(e.At.Add(time.Duration(1+rnd.IntN(30)) * time.Second))
			}
		}
	}
	return evs
}

// analytics must never join fanout's group.
func TestRefusesFanoutGroup(t *testing.T) {
	_, err := analytics.New(analytics.Config{Brokers: []string{"127.0.0.1:1"}, Group: fanout.DefaultGroup})
	require.Error(t, err)
}

// expect is what analytics must report for a run of events, computed from
// the events and the workload generator's own membership model.
type expect struct {
	records, invalid    int64
	events              map[string]int64
	messages, nonMember int64
	fanOut              []int
	senders             map[int64]int64
	top                 []analytics.Sender
	convs               map[int64]bool
}

// generate returns n events and, for each message, its recipients by the
// generator's model: the members after the event, or 0 for the sends the
// generator makes to be rejected. Other events get -1.
func generate(g *workload.Generator, n int) ([]*events.Event, []int) {
	evs := make([]*events.Event, n)
	fans := make([]int, n)
	for i := range evs {
		rejected := g.Rejected
		evs[i] = g.Next()
		switch {
		case evs[i].Type != events.MessageSent:
			fans[i] = -1
		case g.Rejected > rejected:
			fans[i] = 0
		default:
			fans[i] = len(g.Members(evs[i].ConversationID))
		}
	}
	return evs, fans
}

func expectOf(evs []*events.Event, fans []int) expect {
	x := expect{records: int64(len(evs)), events: map[string]int64{}, senders: map[int64]int64{}, convs: map[int64]bool{}}
	for _, t := range analytics.Types() {
		x.events[t] = 0
	}
	for i, e := range evs {
		x.events[e.Type]++
		if e.Type != events.MessageSent {
			continue
		}
		x.messages++
		if fans[i] == 0 {
			x.nonMember++
		}
		x.fanOut = append(x.fanOut, fans[i])
		x.senders[e.ActorID]++
		x.convs[e.ConversationID] = true
	}
	for u, n := range x.senders {
		x.top = append(x.top, analytics.Sender{UserID: u, Messages: n})
	}
	slices.SortFunc(x.top, func(a, b analytics.Sender) int {
		return cmp.Or(cmp.Compare(b.Messages, a.Messages), cmp.Compare(a.UserID, b.UserID))
	})
	x.top = x.top[:min(10, len(x.top))]
	return x
}

func assertFigures(t testing.TB, want expect, got analytics.Figures) {
	t.Helper()
	require.Equal(t, want.records, got.Records, "records")
	require.Equal(t, want.invalid, got.Invalid, "invalid")
	require.Equal(t, want.events, got.Events, "events by type")
	require.Equal(t, want.messages, got.Messages, "messages")
	require.Equal(t, want.nonMember, got.NonMemberMessages, "non-member messages")
	require.Equal(t, want.top, got.TopSenders, "top senders")

	h := got.FanOut
	require.Equal(t, uint64(want.messages), h.Count, "one fan-out per message")
	counts := make([]uint64, len(h.Bounds)+1)
	var sum int64
	for _, n := range want.fanOut {
		i := 0
		for i < len(h.Bounds) && float64(n) > h.Bounds[i] {
			i++
		}
		counts[i]++
		sum += int64(n)
	}
	require.Equal(t, counts, h.Counts, "fan-out buckets")
	require.Equal(t, sum, h.Sum, "fan-out sum")
}

// start runs an analytics consumer with a fixed clock and a window of an
// hour, so that the window holds every generated event; stop cancels it
// and waits.
func start(t testing.TB, env *testenv.Env, group string, reg prometheus.Registerer, now time.Time) (*analytics.Analytics, func()) {
	t.Helper()
	a, err := analytics.New(analytics.Config{Brokers: env.Brokers, Topic: env.Topic, Group: group,
		Window: time.Hour, Registerer: reg, Logger: env.Logger, Now: func() time.Time { return now }})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(time.Minute):
				t.Fatal("analytics did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return a, stop
}

// waitCaughtUp waits until analytics has handled every record up to ends.
func waitCaughtUp(t testing.TB, a *analytics.Analytics, ends map[int32]int64) analytics.Figures {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		f := a.Snapshot()
		done := true
		for p, end := range ends {
			if f.Positions[p] < end {
				done = false
			}
		}
		if done {
			return f
		}
		select {
		case <-deadline:
			t.Fatalf("analytics at %v, want %v", f.Positions, ends)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func appendEvents(t testing.TB, p *producer.Producer, evs []*events.Event) {
	t.Helper()
	ctx := testenv.Ctx(t, time.Minute)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, e := range evs {
		wg.Add(1)
		p.AppendAsync(ctx, e, func(_ producer.Position, err error) {
			if err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	require.NoError(t, first)
}

// endOffsets are the end offsets of the non-empty partitions.
func endOffsets(t testing.TB, env *testenv.Env) map[int32]int64 {
	t.Helper()
	ends, err := kadm.NewClient(env.Producer.Client()).ListEndOffsets(testenv.Ctx(t, time.Minute), env.Topic)
	require.NoError(t, err)
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		require.NoError(t, o.Err)
		if o.Offset > 0 {
			out[o.Partition] = o.Offset
		}
	})
	return out
}

// fanoutOffsets are fanout's stored offsets of every topic.
func fanoutOffsets(t testing.TB, env *testenv.Env) map[int32]int64 {
	t.Helper()
	rows, err := env.Pool.Query(testenv.Ctx(t, time.Minute), `SELECT topic, "partition", next_offset FROM consumer_offsets`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int32]int64{}
	for rows.Next() {
		var topic string
		var p int32
		var n int64
		require.NoError(t, rows.Scan(&topic, &p, &n))
		require.Equal(t, env.Topic, topic)
		out[p] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// groupOffsets are the offsets a group committed to Kafka.
func groupOffsets(t testing.TB, env *testenv.Env, group string) map[int32]int64 {
	t.Helper()
	offs, err := kadm.NewClient(env.Producer.Client()).FetchOffsets(testenv.Ctx(t, time.Minute), group)
	require.NoError(t, err)
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		require.NoError(t, o.Err)
		require.Equal(t, env.Topic, o.Topic)
		if o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// metric returns the value (or a histogram's count) of the one series of
// name whose labels include labels.
func metric(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	var found []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
					continue next
				}
			}
			found = append(found, m)
		}
	}
	require.Len(t, found, 1, "%s%v", name, labels)
	m := found[0]
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	t.Fatalf("%s: no value", name)
	return 0
}

func union(a, b map[int64]bool) map[int64]bool {
	out := map[int64]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
