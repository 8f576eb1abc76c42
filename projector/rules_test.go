package projector

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

// The rules (event -> rows) against a state given in memory: no database.
// Ids are short strings here, since the rules never parse them.

// conv is a conversation as loaded: its last seq and current members.
type conv struct {
	last    int64
	members []int64
	by      int64           // the creator
	joined  map[int64]int64 // a member's span start, when not 1
	// Roles: enforced (conversation.created's roles), the owner and the
	// members' roles other than member.
	enforced bool
	owner    int64
	roles    map[int64]string
}

// state is what a batch starts from, as load.go would read it.
type state struct {
	convs   map[int64]conv
	known   []string          // msg ids (and system messages' event ids) already projected
	records map[[2]int64]rec0 // (user, conversation) -> stored record
	// The changes of messages: stored messages, reactions (conv, seq,
	// user) -> emoji, and applied change ids.
	messages  map[[2]int64]msg0
	reactions map[[3]int64]string
	changes   []string
	// sanctions are the stored bans and mutes.
	sanctions map[sanctionKey]sanction
}

// msg0 is a stored message, as the changes load it.
type msg0 struct {
	sender    int64
	kind      string
	body      string
	at        time.Time
	deleted   bool
	version   int64
	reactions map[string]int64
}

type rec0 struct {
	pinned, muted, removed bool
	read                   int64
}

// result is what the rules produced, in a form that compares.
type result struct {
	convs   map[int64]string   // "none" or "last=N members=[...]" (+ " created")
	msgs    []string           // "conv/seq kind msgID sender body"
	inbox   map[int64][]string // user -> its new entries in order: "msg conv/seq", "rec conv"
	spans   []string           // opened: "conv/user joined-left" (left 0: open)
	closes  []string           // closes of spans opened before: "conv/user left"
	records map[[2]int64]string
	rejects []string // "eventID reason msgID@partition/offset"
	acks    []string // "eventID seq"
	dups    []string
}

var at = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func ev(typ, id string, c, actor int64) *events.Event {
	return &events.Event{V: events.Version, Type: typ, EventID: id, ConversationID: c, ActorID: actor, At: at}
}

func created(id string, c, actor int64, title string, members ...int64) *events.Event {
	e := ev(events.ConversationCreated, id, c, actor)
	e.Title, e.Members = title, members
	return e
}

func added(id string, c, actor, user int64) *events.Event {
	e := ev(events.MemberAdded, id, c, actor)
	e.UserID = user
	return e
}

func removed(id string, c, actor, user int64) *events.Event {
	e := ev(events.MemberRemoved, id, c, actor)
	e.UserID = user
	return e
}

func sent(id, msgID string, c, actor int64, body string) *events.Event {
	e := ev(events.MessageSent, id, c, actor)
	e.MsgID, e.Body = msgID, &body
	return e
}

func recUpdated(id string, c, actor int64, pinned, muted *bool) *events.Event {
	e := ev(events.RecordUpdated, id, c, actor)
	e.Pinned, e.Muted = pinned, muted
	return e
}

func readUpdated(id string, c, actor, seq int64) *events.Event {
	e := ev(events.ReadUpdated, id, c, actor)
	e.ReadSeq = &seq
	return e
}

// dead marks a record as dead-lettered by the fanout.
type dead struct{ *events.Event }

// undecodable is a record whose value could not be decoded.
type undecodable struct{}

// runRules applies the inputs (events, dead or undecodable) as records
// 0, 1, ... of partition 3 to a batch that starts from st, the way apply
// does after loading, and returns the batch.
func runRules(t *testing.T, st state, inputs []any) *batch {
	t.Helper()
	recs := make([]Record, len(inputs))
	for i, in := range inputs {
		r := Record{Partition: 3, Offset: int64(i)}
		switch in := in.(type) {
		case *events.Event:
			r.Event = in
		case dead:
			r.Event, r.DeadLetter = in.Event, true
		case undecodable:
		default:
			t.Fatalf("input %d: %T", i, in)
		}
		recs[i] = r
	}
	b := newBatch(0)
	keys := b.need(recs)
	require.True(t, slices.IsSorted(keys.convIDs), "conversations are locked in id order")
	for id, c := range st.convs {
		require.Contains(t, keys.convIDs, id, "the state names a conversation of the batch")
		b.loadedConv(id, c.last, c.by, c.last)
		b.convs[id].enforced, b.convs[id].owner = c.enforced, c.owner
		for _, u := range c.members {
			joined := int64(1)
			if j, ok := c.joined[u]; ok {
				joined = j
			}
			role := c.roles[u]
			if role == "" {
				role = events.RoleMember
			}
			b.loadedMember(id, u, joined, role)
		}
	}
	asked := map[[2]int64]bool{}
	for i := range keys.msgConvs {
		asked[[2]int64{keys.msgConvs[i], keys.msgSeqs[i]}] = true
	}
	for k, m := range st.messages {
		if !asked[k] {
			continue // the database returns only what the batch asks for
		}
		kind := m.kind
		if kind == "" {
			kind = "text"
		}
		b.msgStates[msgKey{k[0], k[1]}] = &msgState{key: msgKey{k[0], k[1]}, found: true, sender: m.sender, kind: kind,
			body: m.body, at: m.at, deleted: m.deleted, version: max(1, m.version), reactions: m.reactions,
			mine: map[int64]string{}, mineChanged: map[int64]bool{}}
	}
	for k, emoji := range st.reactions {
		if !asked[[2]int64{k[0], k[1]}] {
			continue
		}
		b.msgFor(k[0], k[1]).mine[k[2]] = emoji
	}
	for _, id := range st.changes {
		require.Contains(t, keys.changeIDs, id)
		b.knownChanges.add(id)
	}
	for _, id := range st.known {
		require.Contains(t, keys.msgIDs, id, "the state knows an id the batch asks for")
		b.known.add(id)
	}
	sanctionAsked := map[recKey]bool{}
	for i := range keys.sanctionConvs {
		sanctionAsked[recKey{keys.sanctionUsers[i], keys.sanctionConvs[i]}] = true
	}
	for k, sn := range st.sanctions {
		if sanctionAsked[recKey{k.user, k.conv}] { // the database returns only what the batch asks for
			sn := sn
			b.sanctions[k] = &sn
		}
	}
	for k, r := range st.records {
		b.records[recKey{k[0], k[1]}] = &recState{pinned: r.pinned, muted: r.muted, removed: r.removed, readSeq: r.read}
	}
	for _, r := range recs {
		b.apply(r)
	}
	return b
}

// summarize turns the rows of b into a result.
func summarize(b *batch) result {
	var res result
	res.convs = map[int64]string{}
	for id, c := range b.convs {
		if !c.exists {
			res.convs[id] = "none"
			continue
		}
		var ms []int64
		for u := range c.members {
			ms = append(ms, u)
		}
		slices.Sort(ms)
		s := fmt.Sprintf("last=%d members=%v", c.lastSeq, ms)
		if c.created {
			s += " created"
		}
		res.convs[id] = s
	}
	for _, m := range b.msgs {
		res.msgs = append(res.msgs, fmt.Sprintf("%d/%d %s %s %d %s", m.conv, m.seq, m.kind, m.msgID, m.sender, m.body))
	}
	for _, f := range b.fan {
		if res.inbox == nil {
			res.inbox = map[int64][]string{}
		}
		s := fmt.Sprintf("rec %d", f.conv)
		switch f.kind {
		case projection.KindMessage:
			s = fmt.Sprintf("msg %d/%d", f.conv, f.seq)
		case projection.KindUpdate:
			s = fmt.Sprintf("upd %d/%d", f.conv, f.seq)
		}
		res.inbox[f.user] = append(res.inbox[f.user], s)
	}
	for _, s := range b.newSpans {
		res.spans = append(res.spans, fmt.Sprintf("%d/%d %d-%d", s.conv, s.user, s.joined, s.left))
	}
	for _, s := range b.closes {
		res.closes = append(res.closes, fmt.Sprintf("%d/%d %d", s.conv, s.user, s.left))
	}
	for _, k := range b.recsOrder {
		if res.records == nil {
			res.records = map[[2]int64]string{}
		}
		r := b.records[k]
		res.records[[2]int64{k.user, k.conv}] = fmt.Sprintf("pinned=%v muted=%v read=%d removed=%v", r.pinned, r.muted, r.readSeq, r.removed)
	}
	for _, r := range b.rejects {
		res.rejects = append(res.rejects, fmt.Sprintf("%s %s %s@%d/%d", r.eventID, r.reason, r.msgID, r.partition, r.offset))
	}
	for _, a := range b.acks {
		res.acks = append(res.acks, fmt.Sprintf("%s %d", a.eventID, a.seq))
	}
	res.dups = b.dups
	return res
}

func TestRules(t *testing.T) {
	yes, no := events.Ptr(true), events.Ptr(false)
	const member = "pinned=false muted=false read=1 removed=false" // a join moves the read position to it
	for _, tc := range []struct {
		name   string
		state  state
		inputs []any
		want   result
	}{
		{
			name:   "conversation.created: the creator and the members (once each) join at seq 1",
			inputs: []any{created("e1", 1, 10, "t", 11, 12, 11, 10)},
			want: result{
				convs: map[int64]string{1: "last=1 members=[10 11 12] created"},
				msgs:  []string{`1/1 system e1 10 {"by":10,"event":"conversation.created","members":[10,11,12],"title":"t"}`},
				inbox: map[int64][]string{10: {"msg 1/1", "rec 1"}, 11: {"msg 1/1", "rec 1"}, 12: {"msg 1/1", "rec 1"}},
				spans: []string{"1/10 1-0", "1/11 1-0", "1/12 1-0"},
				records: map[[2]int64]string{
					{10, 1}: member, {11, 1}: member, {12, 1}: member},
			},
		},
		{
			name:   "conversation.created on an existing conversation: conversation_exists",
			state:  state{convs: map[int64]conv{1: {last: 4, members: []int64{10}}}},
			inputs: []any{created("e1", 1, 20, "t")},
			want: result{
				convs:   map[int64]string{1: "last=4 members=[10]"},
				rejects: []string{"e1 conversation_exists @3/0"},
			},
		},
		{
			name:   "conversation.created twice in a batch: applied once, not refused",
			inputs: []any{created("e1", 1, 10, "t"), created("e1", 1, 10, "t")},
			want: result{
				convs:   map[int64]string{1: "last=1 members=[10] created"},
				msgs:    []string{`1/1 system e1 10 {"by":10,"event":"conversation.created","members":[10],"title":"t"}`},
				inbox:   map[int64][]string{10: {"msg 1/1", "rec 1"}},
				spans:   []string{"1/10 1-0"},
				records: map[[2]int64]string{{10, 1}: member},
			},
		},
		{
			name:   "conversation.created already projected (its system message exists): nothing",
			state:  state{convs: map[int64]conv{1: {last: 1, members: []int64{10}}}, known: []string{"e1"}},
			inputs: []any{created("e1", 1, 10, "t")},
			want:   result{convs: map[int64]string{1: "last=1 members=[10]"}},
		},
		{
			name:   "conversation.created then a message in the same batch",
			inputs: []any{created("e1", 1, 10, "t", 11), sent("e2", "m1", 1, 11, "hi")},
			want: result{
				convs: map[int64]string{1: "last=2 members=[10 11] created"},
				msgs: []string{`1/1 system e1 10 {"by":10,"event":"conversation.created","members":[10,11],"title":"t"}`,
					"1/2 text m1 11 hi"},
				inbox:   map[int64][]string{10: {"msg 1/1", "rec 1", "msg 1/2"}, 11: {"msg 1/1", "rec 1", "msg 1/2"}},
				spans:   []string{"1/10 1-0", "1/11 1-0"},
				records: map[[2]int64]string{{10, 1}: member, {11, 1}: "pinned=false muted=false read=2 removed=false" /* its own message */},
				acks:    []string{"e2 2"},
			},
		},
		{
			name: "member.added: a system message to all, then the new member's span and record",
			state: state{convs: map[int64]conv{1: {last: 5, members: []int64{10}}},
				records: map[[2]int64]rec0{{11, 1}: {pinned: true, removed: true, read: 3}}},
			inputs: []any{added("e1", 1, 10, 11)},
			want: result{
				convs:   map[int64]string{1: "last=6 members=[10 11]"},
				msgs:    []string{`1/6 system e1 10 {"by":10,"event":"member.added","user_id":11}`},
				inbox:   map[int64][]string{10: {"msg 1/6"}, 11: {"msg 1/6", "rec 1"}},
				spans:   []string{"1/11 6-0"},
				records: map[[2]int64]string{{11, 1}: "pinned=true muted=false read=6 removed=false"}, // read moves to the join
			},
		},
		{
			name:   "member.added of a member: nothing",
			state:  state{convs: map[int64]conv{1: {last: 5, members: []int64{10, 11}}}},
			inputs: []any{added("e1", 1, 10, 11)},
			want:   result{convs: map[int64]string{1: "last=5 members=[10 11]"}},
		},
		{
			name:   "member.added already projected: nothing",
			state:  state{convs: map[int64]conv{1: {last: 6, members: []int64{10, 11}}}, known: []string{"e1"}},
			inputs: []any{added("e1", 1, 10, 12)},
			want:   result{convs: map[int64]string{1: "last=6 members=[10 11]"}},
		},
		{
			name:   "member.added by a non-member: not_member",
			state:  state{convs: map[int64]conv{1: {last: 5, members: []int64{10}}}},
			inputs: []any{added("e1", 1, 99, 11)},
			want: result{
				convs:   map[int64]string{1: "last=5 members=[10]"},
				rejects: []string{"e1 not_member @3/0"},
			},
		},
		{
			name:   "member.added to no conversation: no_conversation",
			inputs: []any{added("e1", 1, 10, 11)},
			want: result{
				convs:   map[int64]string{1: "none"},
				rejects: []string{"e1 no_conversation @3/0"},
			},
		},
		{
			name:   "member.removed: the member gets its removal, then its span closes",
			state:  state{convs: map[int64]conv{1: {last: 5, members: []int64{10, 11}}}},
			inputs: []any{removed("e1", 1, 10, 11)},
			want: result{
				convs:   map[int64]string{1: "last=6 members=[10]"},
				msgs:    []string{`1/6 system e1 10 {"by":10,"event":"member.removed","user_id":11}`},
				inbox:   map[int64][]string{10: {"msg 1/6"}, 11: {"msg 1/6", "rec 1"}},
				closes:  []string{"1/11 6"},
				records: map[[2]int64]string{{11, 1}: "pinned=false muted=false read=0 removed=true"},
			},
		},
		{
			name:   "a removed member does not receive later messages",
			state:  state{convs: map[int64]conv{1: {last: 5, members: []int64{10, 11}}}},
			inputs: []any{removed("e1", 1, 10, 11), sent("e2", "m1", 1, 10, "after")},
			want: result{
				convs:   map[int64]string{1: "last=7 members=[10]"},
				msgs:    []string{`1/6 system e1 10 {"by":10,"event":"member.removed","user_id":11}`, "1/7 text m1 10 after"},
				inbox:   map[int64][]string{10: {"msg 1/6", "msg 1/7"}, 11: {"msg 1/6", "rec 1"}},
				closes:  []string{"1/11 6"},
				records: map[[2]int64]string{{11, 1}: "pinned=false muted=false read=0 removed=true"},
				acks:    []string{"e2 7"},
			},
		},
		{
			name:  "a removed member's messages are refused: not_member",
			state: state{convs: map[int64]conv{1: {last: 5, members: []int64{10, 11}}}},
			inputs: []any{removed("e1", 1, 10, 11), sent("e2", "m1", 1, 11, "late"),
				recUpdated("e3", 1, 11, yes, nil), readUpdated("e4", 1, 11, 6)},
			want: result{
				convs:   map[int64]string{1: "last=6 members=[10]"},
				msgs:    []string{`1/6 system e1 10 {"by":10,"event":"member.removed","user_id":11}`},
				inbox:   map[int64][]string{10: {"msg 1/6"}, 11: {"msg 1/6", "rec 1"}},
				closes:  []string{"1/11 6"},
				records: map[[2]int64]string{{11, 1}: "pinned=false muted=false read=0 removed=true"},
				rejects: []string{"e2 not_member m1@3/1"},
			},
		},
		{
			name:   "member added and removed in one batch: one span, opened and closed",
			state:  state{convs: map[int64]conv{1: {last: 5, members: []int64{10}}}},
			inputs: []any{added("e1", 1, 10, 11), removed("e2", 1, 10, 11)},
			want: result{
				convs: map[int64]string{1: "last=7 members=[10]"},
				msgs: []string{`1/6 system e1 10 {"by":10,"event":"member.added","user_id":11}`,
					`1/7 system e2 10 {"by":10,"event":"member.removed","user_id":11}`},
				inbox:   map[int64][]string{10: {"msg 1/6", "msg 1/7"}, 11: {"msg 1/6", "rec 1", "msg 1/7", "rec 1"}},
				spans:   []string{"1/11 6-7"},
				records: map[[2]int64]string{{11, 1}: "pinned=false muted=false read=6 removed=true"},
			},
		},
		{
			name:   "member.removed of a non-member: nothing",
			state:  state{convs: map[int64]conv{1: {last: 5, members: []int64{10}}}},
			inputs: []any{removed("e1", 1, 10, 11)},
			want:   result{convs: map[int64]string{1: "last=5 members=[10]"}},
		},
		{
			name:   "member.removed refused: not_member, no_conversation",
			state:  state{convs: map[int64]conv{1: {last: 5, members: []int64{10, 11}}}},
			inputs: []any{removed("e1", 1, 99, 11), removed("e2", 2, 10, 11)},
			want: result{
				convs:   map[int64]string{1: "last=5 members=[10 11]", 2: "none"},
				rejects: []string{"e1 not_member @3/0", "e2 no_conversation @3/1"},
			},
		},
		{
			name:   "message.sent: the next seq, to every member, acked",
			state:  state{convs: map[int64]conv{1: {last: 2, members: []int64{10, 11}}}},
			inputs: []any{sent("e1", "m1", 1, 10, "hi")},
			want: result{
				convs: map[int64]string{1: "last=3 members=[10 11]"},
				msgs:  []string{"1/3 text m1 10 hi"},
				inbox: map[int64][]string{10: {"msg 1/3"}, 11: {"msg 1/3"}},
				acks:  []string{"e1 3"},
			},
		},
		{
			name:   "message.sent twice in a batch: one message, the second a duplicate",
			state:  state{convs: map[int64]conv{1: {last: 2, members: []int64{10}}}},
			inputs: []any{sent("e1", "m1", 1, 10, "hi"), sent("e1", "m1", 1, 10, "hi"), sent("e2", "m1", 1, 10, "again")},
			want: result{
				convs: map[int64]string{1: "last=3 members=[10]"},
				msgs:  []string{"1/3 text m1 10 hi"},
				inbox: map[int64][]string{10: {"msg 1/3"}},
				acks:  []string{"e1 3"},
				dups:  []string{"e1", "e2"},
			},
		},
		{
			name:   "message.sent with a msg_id already projected: a duplicate",
			state:  state{convs: map[int64]conv{1: {last: 2, members: []int64{10}}}, known: []string{"m1"}},
			inputs: []any{sent("e1", "m1", 1, 10, "hi")},
			want: result{
				convs: map[int64]string{1: "last=2 members=[10]"},
				dups:  []string{"e1"},
			},
		},
		{
			name:   "message.sent refused: not_member, no_conversation (with the msg id)",
			state:  state{convs: map[int64]conv{1: {last: 2, members: []int64{10}}}},
			inputs: []any{sent("e1", "m1", 1, 99, "hi"), sent("e2", "m2", 2, 10, "hi")},
			want: result{
				convs:   map[int64]string{1: "last=2 members=[10]", 2: "none"},
				rejects: []string{"e1 not_member m1@3/0", "e2 no_conversation m2@3/1"},
			},
		},
		{
			name:   "a refused event twice in a batch: one rejection",
			state:  state{convs: map[int64]conv{1: {last: 2, members: []int64{10}}}},
			inputs: []any{sent("e1", "m1", 1, 99, "hi"), sent("e1", "m1", 1, 99, "hi"), added("e2", 1, 99, 11), added("e2", 1, 99, 11)},
			want: result{
				convs:   map[int64]string{1: "last=2 members=[10]"},
				rejects: []string{"e1 not_member m1@3/0", "e2 not_member @3/2"},
			},
		},
		{
			name:   "dead-lettered records: dead_letter, once, and no seq",
			state:  state{convs: map[int64]conv{1: {last: 2, members: []int64{10}}}},
			inputs: []any{dead{sent("e1", "m1", 1, 10, "x")}, dead{sent("e1", "m1", 1, 10, "x")}, dead{created("e2", 7, 10, "t")}, sent("e3", "m3", 1, 10, "y")},
			want: result{
				convs:   map[int64]string{1: "last=3 members=[10]"},
				msgs:    []string{"1/3 text m3 10 y"},
				inbox:   map[int64][]string{10: {"msg 1/3"}},
				rejects: []string{"e1 dead_letter m1@3/0", "e2 dead_letter @3/2"},
				acks:    []string{"e3 3"},
			},
		},
		{
			name:   "an undecodable record: nothing",
			inputs: []any{undecodable{}},
			want:   result{convs: map[int64]string{}},
		},
		{
			name:   "record.updated: pin and mute, one record entry each",
			state:  state{convs: map[int64]conv{1: {last: 2, members: []int64{10}}}},
			inputs: []any{recUpdated("e1", 1, 10, yes, nil), recUpdated("e2", 1, 10, nil, yes)},
			want: result{
				convs:   map[int64]string{1: "last=2 members=[10]"},
				inbox:   map[int64][]string{10: {"rec 1", "rec 1"}},
				records: map[[2]int64]string{{10, 1}: "pinned=true muted=true read=0 removed=false"},
			},
		},
		{
			name: "record.updated to what it is: nothing",
			state: state{convs: map[int64]conv{1: {last: 2, members: []int64{10}}},
				records: map[[2]int64]rec0{{10, 1}: {pinned: true, read: 2}}},
			inputs: []any{recUpdated("e1", 1, 10, yes, nil), recUpdated("e2", 1, 10, nil, no), recUpdated("e3", 1, 10, yes, no), recUpdated("e4", 1, 10, nil, nil)},
			want:   result{convs: map[int64]string{1: "last=2 members=[10]"}},
		},
		{
			name:   "record.updated by a non-member or of no conversation: ignored, not refused",
			state:  state{convs: map[int64]conv{1: {last: 2, members: []int64{10}}}},
			inputs: []any{recUpdated("e1", 1, 99, yes, nil), recUpdated("e2", 2, 10, yes, nil)},
			want:   result{convs: map[int64]string{1: "last=2 members=[10]", 2: "none"}},
		},
		{
			name:   "read.updated: moves forward, capped at the last seq",
			state:  state{convs: map[int64]conv{1: {last: 5, members: []int64{10, 11}}}},
			inputs: []any{readUpdated("e1", 1, 10, 3), readUpdated("e2", 1, 11, 9)},
			want: result{
				convs: map[int64]string{1: "last=5 members=[10 11]"},
				inbox: map[int64][]string{10: {"rec 1"}, 11: {"rec 1"}},
				records: map[[2]int64]string{
					{10, 1}: "pinned=false muted=false read=3 removed=false",
					{11, 1}: "pinned=false muted=false read=5 removed=false"},
			},
		},
		{
			name: "read.updated never moves back",
			state: state{convs: map[int64]conv{1: {last: 5, members: []int64{10}}},
				records: map[[2]int64]rec0{{10, 1}: {read: 4}}},
			inputs: []any{readUpdated("e1", 1, 10, 2), readUpdated("e2", 1, 10, 4), readUpdated("e3", 1, 10, 5), readUpdated("e4", 1, 10, 3), readUpdated("e5", 1, 10, 7)},
			want: result{
				convs:   map[int64]string{1: "last=5 members=[10]"},
				inbox:   map[int64][]string{10: {"rec 1"}},
				records: map[[2]int64]string{{10, 1}: "pinned=false muted=false read=5 removed=false"},
			},
		},
		{
			name:   "read.updated of a message sent in the same batch",
			state:  state{convs: map[int64]conv{1: {last: 5, members: []int64{10}}}},
			inputs: []any{sent("e1", "m1", 1, 10, "hi"), readUpdated("e2", 1, 10, 6)},
			want: result{
				convs:   map[int64]string{1: "last=6 members=[10]"},
				msgs:    []string{"1/6 text m1 10 hi"},
				inbox:   map[int64][]string{10: {"msg 1/6", "rec 1"}},
				records: map[[2]int64]string{{10, 1}: "pinned=false muted=false read=6 removed=false"},
				acks:    []string{"e1 6"},
			},
		},
		{
			name:   "read.updated by a non-member or of no conversation: ignored, not refused",
			state:  state{convs: map[int64]conv{1: {last: 5, members: []int64{10}}}},
			inputs: []any{readUpdated("e1", 1, 99, 3), readUpdated("e2", 2, 10, 3)},
			want:   result{convs: map[int64]string{1: "last=5 members=[10]", 2: "none"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := runRules(t, tc.state, tc.inputs)
			if got := summarize(b); !reflect.DeepEqual(tc.want, got) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
			// Every record entry points at the record it changed.
			for _, f := range b.fan {
				if f.kind == projection.KindRecord {
					require.Same(t, b.records[recKey{f.user, f.conv}], f.rec)
				}
			}
		})
	}
}
