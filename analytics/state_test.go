package analytics

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// feeder hands records of one partition to a state, offsets in order.
type feeder struct {
	t   testing.TB
	s   *state
	p   *partition
	off int64
	now time.Time
}

func newFeeder(t testing.TB, window time.Duration, resumeAt int64) *feeder {
	s := newState(window, events.DefaultMaxBody, DefaultFanOutBuckets(), 3)
	p := newPartition(resumeAt)
	s.parts[0] = p
	return &feeder{t: t, s: s, p: p, now: t0}
}

func (f *feeder) raw(typ string, value []byte) error {
	r := &kgo.Record{Partition: 0, Offset: f.off, Value: value, Timestamp: f.now}
	if typ != "" {
		r.Headers = []kgo.RecordHeader{{Key: events.HeaderType, Value: []byte(typ)}}
	}
	f.off++
	_, err := f.s.handle(f.p, r, f.now)
	return err
}

func (f *feeder) event(e *events.Event) {
	f.t.Helper()
	v, err := json.Marshal(e)
	require.NoError(f.t, err)
	require.NoError(f.t, f.raw(e.Type, v))
}

func ev(typ string, conv, actor int64, at time.Time) *events.Event {
	e := events.New(typ, conv, actor)
	e.At = at
	switch typ {
	case events.MessageSent:
		e.MsgID = uuid.NewString()
		e.Body = events.Ptr("hi")
	case events.RecordUpdated:
		e.Pinned = events.Ptr(true)
	case events.ReadUpdated:
		e.ReadSeq = events.Ptr(int64(1))
	}
	return e
}

func created(conv, actor int64, members ...int64) *events.Event {
	e := ev(events.ConversationCreated, conv, actor, t0)
	e.Members = members
	return e
}

func member(typ string, conv, actor, user int64) *events.Event {
	e := ev(typ, conv, actor, t0)
	e.UserID = user
	return e
}

func msg(conv, actor int64) *events.Event { return ev(events.MessageSent, conv, actor, t0) }

// Membership follows fanout's rules, and every message is counted with the
// fan-out fanout gives it.
func TestMembershipAndFanOut(t *testing.T) {
	tests := []struct {
		name      string
		evs       []*events.Event
		fanOut    int // of the last message
		nonMember bool
	}{
		{"creator and members, duplicates once", []*events.Event{created(1, 1, 2, 3, 2, 1), msg(1, 1)}, 3, false},
		{"unknown conversation", []*events.Event{msg(1, 1)}, 0, true},
		{"stranger's send", []*events.Event{created(1, 1, 2), msg(1, 9)}, 0, true},
		{"added member sends", []*events.Event{created(1, 1, 2), member(events.MemberAdded, 1, 2, 9), msg(1, 9)}, 3, false},
		{"adding a member again", []*events.Event{created(1, 1, 2), member(events.MemberAdded, 1, 2, 1), msg(1, 1)}, 2, false},
		{"added by a non-member", []*events.Event{created(1, 1, 2), member(events.MemberAdded, 1, 7, 9), msg(1, 9)}, 0, true},
		{"removed member sends", []*events.Event{created(1, 1, 2, 3), member(events.MemberRemoved, 1, 1, 3), msg(1, 3)}, 0, true},
		{"removal by a non-member", []*events.Event{created(1, 1, 2, 3), member(events.MemberRemoved, 1, 7, 3), msg(1, 3)}, 3, false},
		{"removing oneself", []*events.Event{created(1, 1, 2, 3), member(events.MemberRemoved, 1, 3, 3), msg(1, 1)}, 2, false},
		{"created again", []*events.Event{created(1, 1, 2), created(1, 5, 6, 7), msg(1, 5)}, 0, true},
		{"other conversation", []*events.Event{created(1, 1, 2), created(2, 3, 4, 5, 6), msg(2, 3)}, 4, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFeeder(t, time.Minute, 0)
			for _, e := range tc.evs {
				f.event(e)
			}
			got := f.s.snapshot(t0)
			require.Equal(t, int64(1), got.Messages)
			require.Equal(t, uint64(1), got.FanOut.Count)
			require.Equal(t, int64(tc.fanOut), got.FanOut.Sum)
			require.Equal(t, tc.nonMember, got.NonMemberMessages == 1)
			require.Equal(t, int64(len(tc.evs)), got.Records)
		})
	}
}

func sanction(typ string, conv, actor, user int64, until *time.Time) *events.Event {
	e := member(typ, conv, actor, user)
	e.Until = until
	return e
}

func roleSet(conv, actor, user int64, role string) *events.Event {
	e := member(events.MemberRoleSet, conv, actor, user)
	e.Role = role
	return e
}

// withRoles is a conversation.created whose roles limit adding and removing.
func withRoles(e *events.Event) *events.Event {
	e.Roles = true
	return e
}

// asService makes e a service's, acting as itself.
func asService(e *events.Event) *events.Event {
	e.ActorID, e.Service = 0, "moderation-bot"
	if e.Type == events.MessageSent {
		e.SenderName = "Bot"
	}
	return e
}

func at(e *events.Event, d time.Duration) *events.Event {
	e.At = t0.Add(d)
	return e
}

// Roles, bans and mutes change membership, and refuse sends, as the
// projection's rules say (docs/protocol.md, "Roles" and "Ban and mute"):
// the fan-out of the last message, and why it is refused.
func TestModerationMembership(t *testing.T) {
	minute := t0.Add(time.Minute)
	const (
		none      = ""
		nonMember = projection.ReasonNotMember
		muted     = projection.ReasonMuted
	)
	tests := []struct {
		name    string
		evs     []*events.Event
		fanOut  int
		refused string
	}{
		{"a ban removes a member", []*events.Event{created(1, 1, 2, 3), sanction(events.MemberBanned, 1, 1, 3, nil), msg(1, 1)}, 2, none},
		{"a banned member's send", []*events.Event{created(1, 1, 2, 3), sanction(events.MemberBanned, 1, 1, 3, nil), msg(1, 3)}, 0, nonMember},
		{"a user banned in advance is not added", []*events.Event{created(1, 1, 2), sanction(events.MemberBanned, 1, 1, 9, nil),
			member(events.MemberAdded, 1, 1, 9), msg(1, 9)}, 0, nonMember},
		{"a service's add meets the ban too", []*events.Event{created(1, 1, 2), sanction(events.MemberBanned, 1, 1, 9, nil),
			asService(member(events.MemberAdded, 1, 1, 9)), msg(1, 1)}, 2, none},
		{"an unbanned user is added", []*events.Event{created(1, 1, 2), sanction(events.MemberBanned, 1, 1, 9, nil),
			sanction(events.MemberUnbanned, 1, 1, 9, nil), member(events.MemberAdded, 1, 1, 9), msg(1, 9)}, 3, none},
		{"a ban lapsed by the add", []*events.Event{created(1, 1, 2), sanction(events.MemberBanned, 1, 1, 9, &minute),
			at(member(events.MemberAdded, 1, 1, 9), 2*time.Minute), at(msg(1, 9), 2*time.Minute)}, 3, none},
		{"a ban standing at the add", []*events.Event{created(1, 1, 2), sanction(events.MemberBanned, 1, 1, 9, &minute),
			at(member(events.MemberAdded, 1, 1, 9), 30*time.Second), msg(1, 1)}, 2, none},
		{"a member may not ban", []*events.Event{created(1, 1, 2, 3), sanction(events.MemberBanned, 1, 2, 3, nil), msg(1, 3)}, 3, none},
		{"nobody bans itself", []*events.Event{created(1, 1, 2), sanction(events.MemberBanned, 1, 1, 1, nil), msg(1, 1)}, 2, none},
		{"a non-member may not ban", []*events.Event{created(1, 1, 2), sanction(events.MemberBanned, 1, 7, 2, nil), msg(1, 2)}, 2, none},
		{"a service bans", []*events.Event{created(1, 1, 2, 3), asService(sanction(events.MemberBanned, 1, 1, 3, nil)), msg(1, 1)}, 2, none},
		{"a moderator bans a member", []*events.Event{created(1, 1, 2, 3), roleSet(1, 1, 2, events.RoleModerator),
			sanction(events.MemberBanned, 1, 2, 3, nil), msg(1, 1)}, 2, none},
		{"a moderator may not ban the owner", []*events.Event{created(1, 1, 2, 3), roleSet(1, 1, 2, events.RoleModerator),
			sanction(events.MemberBanned, 1, 2, 1, nil), msg(1, 1)}, 3, none},
		{"a role set by a member is refused", []*events.Event{created(1, 1, 2, 3), roleSet(1, 3, 2, events.RoleModerator),
			sanction(events.MemberBanned, 1, 2, 3, nil), msg(1, 3)}, 3, none},
		{"a muted member's send", []*events.Event{created(1, 1, 2, 3), sanction(events.MemberMuted, 1, 1, 3, nil), msg(1, 3)}, 0, muted},
		{"a muted member still receives", []*events.Event{created(1, 1, 2, 3), sanction(events.MemberMuted, 1, 1, 3, nil), msg(1, 2)}, 3, none},
		{"a mute lapsed by the send", []*events.Event{created(1, 1, 2, 3), sanction(events.MemberMuted, 1, 1, 3, &minute),
			at(msg(1, 3), time.Minute)}, 3, none},
		{"an unmuted member sends", []*events.Event{created(1, 1, 2, 3), sanction(events.MemberMuted, 1, 1, 3, nil),
			sanction(events.MemberUnmuted, 1, 1, 3, nil), msg(1, 3)}, 3, none},
		{"a mute outlives leaving and rejoining", []*events.Event{created(1, 1, 2, 3), sanction(events.MemberMuted, 1, 1, 3, nil),
			member(events.MemberRemoved, 1, 3, 3), member(events.MemberAdded, 1, 1, 3), msg(1, 3)}, 0, muted},
		{"a member may not mute", []*events.Event{created(1, 1, 2, 3), sanction(events.MemberMuted, 1, 2, 3, nil), msg(1, 3)}, 3, none},
		{"a mute of a non-member is refused", []*events.Event{created(1, 1, 2), sanction(events.MemberMuted, 1, 1, 9, nil),
			member(events.MemberAdded, 1, 1, 9), msg(1, 9)}, 3, none},
		{"roles enforced: a member may not add", []*events.Event{withRoles(created(1, 1, 2)), member(events.MemberAdded, 1, 2, 9), msg(1, 9)}, 0, nonMember},
		{"roles enforced: an admin adds", []*events.Event{withRoles(created(1, 1, 2)), roleSet(1, 1, 2, events.RoleAdmin),
			member(events.MemberAdded, 1, 2, 9), msg(1, 9)}, 3, none},
		{"roles enforced: a member may not remove", []*events.Event{withRoles(created(1, 1, 2, 3)), member(events.MemberRemoved, 1, 2, 3), msg(1, 3)}, 3, none},
		{"roles enforced: a member leaves", []*events.Event{withRoles(created(1, 1, 2, 3)), member(events.MemberRemoved, 1, 3, 3), msg(1, 1)}, 2, none},
		{"a transfer makes the old owner an admin", []*events.Event{withRoles(created(1, 1, 2, 3)), roleSet(1, 1, 2, events.RoleOwner),
			member(events.MemberRemoved, 1, 1, 2), member(events.MemberRemoved, 1, 1, 3), msg(1, 1)}, 2, none},
		{"a role does not survive leaving", []*events.Event{withRoles(created(1, 1, 2)), roleSet(1, 1, 2, events.RoleAdmin),
			member(events.MemberRemoved, 1, 2, 2), member(events.MemberAdded, 1, 1, 2), member(events.MemberAdded, 1, 2, 9), msg(1, 1)}, 2, none},
		{"a service creates for users", []*events.Event{asService(created(1, 1, 2, 3)), msg(1, 2)}, 2, none},
		{"a service's own message", []*events.Event{created(1, 1, 2, 3), asService(msg(1, 1))}, 3, none},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFeeder(t, time.Hour, 0)
			for _, e := range tc.evs {
				f.event(e)
			}
			got := f.s.snapshot(t0)
			require.Equal(t, int64(1), got.Messages)
			require.Equal(t, int64(tc.fanOut), got.FanOut.Sum)
			require.Equal(t, tc.refused == nonMember, got.NonMemberMessages == 1, "non-member")
			require.Equal(t, tc.refused == muted, got.MutedMessages == 1, "muted")
			require.Equal(t, int64(len(tc.evs)), got.Records)
			for _, e := range tc.evs {
				require.Positive(t, got.Events[e.Type], "%s is counted by its type", e.Type)
			}
		})
	}
}

// Records are judged by their header first: types analytics does not need
// are counted undecoded, the others must decode to the header's type.
func TestHeaderFilterAndInvalid(t *testing.T) {
	f := newFeeder(t, time.Minute, 0)
	f.event(created(1, 1, 2))
	require.NoError(t, f.raw(events.ReadUpdated, []byte("not even JSON")))
	require.NoError(t, f.raw("message.vanished", []byte("{}")))
	require.NoError(t, f.raw("", []byte("{}")))
	require.ErrorIs(t, f.raw(events.MessageSent, []byte("{{{")), events.ErrInvalid)
	body, err := json.Marshal(ev(events.ReadUpdated, 1, 1, t0))
	require.NoError(t, err)
	require.ErrorIs(t, f.raw(events.MessageSent, body), errHeaderMismatch)
	f.event(ev(events.RecordUpdated, 1, 1, t0))
	f.event(msg(1, 2))

	got := f.s.snapshot(t0)
	require.Equal(t, int64(8), got.Records)
	require.Equal(t, int64(2), got.Invalid)
	require.Equal(t, int64(1), got.Messages)
	require.Equal(t, map[string]int64{
		events.ConversationCreated: 1, events.MemberAdded: 0, events.MemberRemoved: 0,
		events.MessageSent: 3, events.RecordUpdated: 1, events.ReadUpdated: 1, TypeUnknown: 2,
		events.MessageEdited: 0, events.MessageDeleted: 0, events.ReactionAdded: 0, events.ReactionRemoved: 0,
		events.MessageThumbnailed: 0, events.MessageReported: 0, events.ReportResolved: 0, events.MemberRoleSet: 0,
		events.MemberBanned: 0, events.MemberUnbanned: 0, events.MemberMuted: 0, events.MemberUnmuted: 0,
	}, got.Events)
}

// The window is over event time, ends at the clock, and moves with it.
func TestWindow(t *testing.T) {
	f := newFeeder(t, time.Minute, 0)
	f.event(created(1, 1, 2))
	f.event(created(2, 1, 2))
	f.now = t0.Add(2 * time.Minute)
	for _, e := range []*events.Event{
		ev(events.MessageSent, 1, 1, t0),                         // long before the window
		ev(events.MessageSent, 1, 2, f.now.Add(-59*time.Second)), // inside
		ev(events.MessageSent, 2, 1, f.now.Add(-30*time.Second)), // inside
		ev(events.MessageSent, 2, 1, f.now.Add(-10*time.Second)), // inside
		ev(events.MessageSent, 2, 2, f.now.Add(2*time.Second)),   // the gateway's clock is ahead
		ev(events.MessageSent, 1, 1, f.now.Add(-60*time.Second)), // just out
		ev(events.MessageSent, 3, 1, f.now.Add(-1*time.Second)),  // unknown conversation: still a message
		ev(events.MessageSent, 2, 1, f.now.Add(-61*time.Second)), // out
	} {
		f.event(e)
	}
	at := func(d time.Duration) Figures { return f.s.snapshot(f.now.Add(d)) }

	got := at(0)
	require.Equal(t, int64(8), got.Messages)
	require.Equal(t, int64(5), got.WindowMessages)
	require.Equal(t, 5.0, got.MessagesPerMinute)
	require.Equal(t, 3, got.ActiveConversations)
	require.Equal(t, 2, got.Conversations)

	got = at(31 * time.Second) // the -59 s and -30 s messages left
	require.Equal(t, int64(3), got.WindowMessages)
	require.Equal(t, 2, got.ActiveConversations)

	got = at(time.Hour)
	require.Equal(t, int64(0), got.WindowMessages)
	require.Equal(t, 0, got.ActiveConversations)
	require.Empty(t, f.p.perSec, "pruned")
	require.Empty(t, f.p.active, "pruned")

	f2 := newFeeder(t, 2*time.Minute, 0)
	f2.event(msg(1, 1))
	require.Equal(t, 0.5, f2.s.snapshot(t0).MessagesPerMinute, "scaled to a minute")
}

// Below the committed offset, records only rebuild membership and the
// window; counting starts at it.
func TestReplayBelowCommittedOffset(t *testing.T) {
	f := newFeeder(t, time.Hour, 4)
	f.now = t0.Add(time.Minute)
	f.event(created(1, 1, 2))
	f.event(member(events.MemberAdded, 1, 1, 3))
	f.event(msg(1, 1))
	require.Error(t, f.raw(events.MessageSent, []byte("{{{"))) // counted as invalid by the earlier run, not again
	f.event(msg(1, 3))                                         // offset 4: counted
	f.event(member(events.MemberRemoved, 1, 1, 2))
	f.event(msg(1, 1))

	got := f.s.snapshot(f.now)
	require.Equal(t, int64(4), got.Replayed)
	require.Equal(t, int64(3), got.Records)
	require.Equal(t, int64(0), got.Invalid)
	require.Equal(t, int64(2), got.Messages)
	require.Equal(t, int64(3+2), got.FanOut.Sum, "membership rebuilt from the replay")
	require.Equal(t, map[int64]int64{1: 1, 3: 1}, senders(got.TopSenders))
	require.Equal(t, int64(1), got.Events[events.MemberRemoved])
	require.Equal(t, int64(0), got.Events[events.ConversationCreated])
	require.Equal(t, int64(3), got.WindowMessages, "the window covers replayed messages")
	require.Equal(t, int64(7), got.Positions[0])

	// A replayed message whose record is older than the window is not
	// even decoded.
	old := newFeeder(t, time.Minute, 1)
	r := &kgo.Record{Offset: 0, Value: []byte("{{{"), Timestamp: t0,
		Headers: []kgo.RecordHeader{{Key: events.HeaderType, Value: []byte(events.MessageSent)}}}
	counted, err := old.s.handle(old.p, r, t0.Add(time.Hour))
	require.NoError(t, err)
	require.False(t, counted)
	require.Equal(t, int64(1), old.s.replayed)
}

func senders(ss []Sender) map[int64]int64 {
	m := map[int64]int64{}
	for _, s := range ss {
		m[s.UserID] = s.Messages
	}
	return m
}

func TestTopSenders(t *testing.T) {
	tests := []struct {
		name string
		in   map[int64]int64
		n    int
		want []Sender
	}{
		{"none", map[int64]int64{}, 3, []Sender{}},
		{"fewer than n", map[int64]int64{5: 1, 4: 2}, 3, []Sender{{4, 2}, {5, 1}}},
		{"ties by lower id", map[int64]int64{9: 3, 2: 3, 7: 3, 1: 1, 3: 5}, 3, []Sender{{3, 5}, {2, 3}, {7, 3}}},
		{"one", map[int64]int64{1: 1, 2: 2, 3: 2}, 1, []Sender{{2, 2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, topSenders(tc.in, tc.n))
		})
	}
}

func TestQuantile(t *testing.T) {
	h := Histogram{Bounds: []float64{1, 5, 10}, Counts: []uint64{0, 0, 0, 0}}
	require.Equal(t, 0.0, h.Quantile(0.5), "empty")
	h = Histogram{Bounds: []float64{1, 5, 10}, Counts: []uint64{2, 0, 7, 1}, Count: 10}
	require.Equal(t, 1.0, h.Quantile(0.1))
	require.Equal(t, 10.0, h.Quantile(0.5))
	require.Equal(t, 10.0, h.Quantile(0.9))
	require.True(t, math.IsInf(h.Quantile(0.99), 1))
}

func TestConfig(t *testing.T) {
	valid := Config{Brokers: []string{"127.0.0.1:9092"}}
	tests := []struct {
		name   string
		change func(*Config)
		ok     bool
	}{
		{"defaults", func(*Config) {}, true},
		{"no brokers", func(c *Config) { c.Brokers = nil }, false},
		{"fanout's group", func(c *Config) { c.Group = fanoutGroup }, false},
		{"window below a second", func(c *Config) { c.Window = 900 * time.Millisecond }, false},
		{"negative top", func(c *Config) { c.TopSenders = -1 }, false},
		{"buckets not increasing", func(c *Config) { c.FanOutBuckets = []float64{1, 5, 5} }, false},
		{"buckets empty", func(c *Config) { c.FanOutBuckets = []float64{} }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid
			tc.change(&c)
			_, err := New(c)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
	a, err := New(valid)
	require.NoError(t, err)
	require.Equal(t, DefaultGroup, a.cfg.Group)
	require.Equal(t, time.Minute, a.cfg.Window)
}

// Any record, however malformed, is counted exactly once and never panics.
func FuzzHandle(f *testing.F) {
	good, _ := json.Marshal(msg(1, 1))
	f.Add(events.MessageSent, good, int64(0))
	f.Add(events.ConversationCreated, []byte(`{"v":1}`), int64(3))
	f.Add("", []byte{0xff}, int64(-5))
	f.Fuzz(func(t *testing.T, typ string, value []byte, atOffset int64) {
		s := newState(time.Minute, events.DefaultMaxBody, DefaultFanOutBuckets(), 10)
		p := newPartition(0)
		s.parts[0] = p
		r := &kgo.Record{Offset: max(atOffset, 0), Value: value, Timestamp: t0,
			Headers: []kgo.RecordHeader{{Key: events.HeaderType, Value: []byte(typ)}}}
		_, _ = s.handle(p, r, t0)
		got := s.snapshot(t0)
		var sum int64
		for _, n := range got.Events {
			sum += n
		}
		require.Equal(t, int64(1), got.Records)
		require.Equal(t, int64(1), sum)
		require.LessOrEqual(t, got.Invalid+got.Messages, int64(1))
		require.LessOrEqual(t, got.Messages, got.Events[events.MessageSent])
		require.Equal(t, uint64(got.Messages), got.FanOut.Count)
		require.Equal(t, got.NonMemberMessages, got.Messages, "no conversation was created")
	})
}

func TestWriteTable(t *testing.T) {
	f := newFeeder(t, time.Minute, 0)
	f.event(created(1, 1, 2, 3))
	f.event(msg(1, 2))
	f.event(msg(1, 9))
	var b strings.Builder
	require.NoError(t, f.s.snapshot(t0).WriteTable(&b))
	out := b.String()
	for _, want := range []string{
		"inboxd analytics at 2026-11-30T10:00:00Z, window 1m0s\n",
		"  messages/minute                 2.0  2 in the window\n",
		"  messages                          2  1 from non-members, 0 muted\n",
		"    message.sent                    2\n",
		"  fan-out size               mean 1.5  p50 <= 0, p90 <= 3, p99 <= 3\n",
		"     2. user 9                      1\n",
		"  next offsets                         0:3\n",
	} {
		require.Contains(t, out, want)
	}
	for _, line := range strings.Split(out, "\n") {
		require.Equal(t, strings.TrimRight(line, " "), line, "no trailing blanks")
	}
	t.Log("\n" + out)
}
