package projector

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

func changeEv(typ, id, changeID string, c, actor, seq int64) *events.Event {
	e := ev(typ, id, c, actor)
	e.ChangeID, e.Seq = changeID, seq
	return e
}

func edited(id, changeID string, c, actor, seq int64, body string) *events.Event {
	e := changeEv(events.MessageEdited, id, changeID, c, actor, seq)
	e.Body = &body
	return e
}

func reacted(id, changeID string, c, actor, seq int64, emoji string) *events.Event {
	e := changeEv(events.ReactionAdded, id, changeID, c, actor, seq)
	e.Emoji = emoji
	return e
}

// changeResult is what the change rules produced.
type changeResult struct {
	msgs    []string // "conv/seq v=N body deleted reactions mine"
	inbox   map[int64][]string
	changes []string // "changeID conv/seq v=N"
	rejects []string // "eventID reason changeID"
	dups    []string
	acks    []string
}

func summarizeChanges(b *batch) changeResult {
	var res changeResult
	var keys []msgKey
	for k, m := range b.msgStates {
		if m.changed {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b msgKey) int { return int(a.conv-b.conv)*1000 + int(a.seq-b.seq) })
	for _, k := range keys {
		m := b.msgStates[k]
		var rs, mine []string
		for e, n := range m.reactions {
			rs = append(rs, fmt.Sprintf("%s:%d", e, n))
		}
		for u := range m.mineChanged {
			mine = append(mine, fmt.Sprintf("%d=%s", u, m.mine[u]))
		}
		slices.Sort(rs)
		slices.Sort(mine)
		s := fmt.Sprintf("%d/%d v=%d %q", k.conv, k.seq, m.version, m.body)
		if m.deleted {
			s += " deleted"
		}
		if len(rs) > 0 {
			s += " " + strings.Join(rs, ",")
		}
		if len(mine) > 0 {
			s += " mine:" + strings.Join(mine, ",")
		}
		if m.replyTo > 0 {
			s += fmt.Sprintf(" reply_to=%d", m.replyTo)
		}
		res.msgs = append(res.msgs, s)
	}
	for _, f := range b.fan {
		if f.kind != projection.KindUpdate {
			continue
		}
		if res.inbox == nil {
			res.inbox = map[int64][]string{}
		}
		res.inbox[f.user] = append(res.inbox[f.user], fmt.Sprintf("upd %d/%d", f.conv, f.seq))
	}
	for _, c := range b.changes {
		res.changes = append(res.changes, fmt.Sprintf("%s %d/%d v=%d", c.changeID, c.conv, c.seq, c.version))
	}
	for _, r := range b.rejects {
		res.rejects = append(res.rejects, fmt.Sprintf("%s %s %s", r.eventID, r.reason, r.msgID))
	}
	res.dups = b.dups
	for _, a := range b.changeAcks {
		res.acks = append(res.acks, fmt.Sprintf("%s %d", a.eventID, a.seq))
	}
	return res
}

// TestChangeRules covers every change event and every refusal of one,
// duplicates and the coalescing of a burst, with no database.
func TestChangeRules(t *testing.T) {
	// Conversation 1, created by 10; 10 and 11 since seq 1, 12 since seq 6.
	// Seq 3 is 11's "hi", seq 4 a system message, seq 5 10's "yo" with a
	// reaction of 11's.
	base := func() state {
		return state{
			convs: map[int64]conv{1: {last: 6, members: []int64{10, 11, 12}, by: 10, joined: map[int64]int64{12: 6}}},
			messages: map[[2]int64]msg0{
				{1, 3}: {sender: 11, body: "hi", at: at},
				{1, 4}: {sender: 10, kind: "system", body: "{}", at: at},
				{1, 5}: {sender: 10, body: "yo", at: at, version: 2, reactions: map[string]int64{"👍": 1}},
				{1, 6}: {sender: 10, body: "gone", at: at, deleted: true, version: 3},
			},
			reactions: map[[3]int64]string{{1, 5, 11}: "👍"},
		}
	}
	later := at.Add(projection.EditWindow + 1)
	late := edited("e4", "c4", 1, 11, 3, "late")
	late.At = later
	for _, tc := range []struct {
		name   string
		state  state
		inputs []any
		want   changeResult
	}{
		{
			name:   "edit by the sender: new body, version 2, an update for each member who can see it",
			inputs: []any{edited("e1", "c1", 1, 11, 3, "hello")},
			want: changeResult{
				msgs:    []string{`1/3 v=2 "hello"`},
				inbox:   map[int64][]string{10: {"upd 1/3"}, 11: {"upd 1/3"}},
				changes: []string{"c1 1/3 v=2"},
				acks:    []string{"e1 3"},
			},
		},
		{
			name:   "edit by someone else, of a system message, a deleted one, after the window",
			inputs: []any{edited("e1", "c1", 1, 10, 3, "x"), edited("e2", "c2", 1, 10, 4, "x"), edited("e3", "c3", 1, 10, 6, "x"), late},
			want:   changeResult{rejects: []string{"e1 not_sender c1", "e2 system_message c2", "e3 deleted c3", "e4 edit_window c4"}},
		},
		{
			name: "changes by a non-member, of an unknown seq, of a message from before the actor joined",
			inputs: []any{edited("e1", "c1", 1, 99, 3, "x"), reacted("e2", "c2", 1, 10, 9, "👍"),
				reacted("e3", "c3", 1, 12, 5, "👍"), reacted("e4", "c4", 2, 10, 1, "👍")},
			want: changeResult{rejects: []string{"e1 not_member c1", "e2 no_message c2", "e3 no_message c3", "e4 no_conversation c4"}},
		},
		{
			name:   "a change_id already applied, or twice in the batch: applied once",
			state:  func() state { s := base(); s.changes = []string{"c0"}; return s }(),
			inputs: []any{edited("e0", "c0", 1, 11, 3, "x"), edited("e1", "c1", 1, 11, 3, "y"), edited("e1", "c1", 1, 11, 3, "y")},
			want: changeResult{
				msgs:    []string{`1/3 v=2 "y"`},
				inbox:   map[int64][]string{10: {"upd 1/3"}, 11: {"upd 1/3"}},
				changes: []string{"c1 1/3 v=2"},
				dups:    []string{"e0", "e1"},
				acks:    []string{"e1 3"},
			},
		},
		{
			name:   "an edit to the same text changes nothing but answers",
			inputs: []any{edited("e1", "c1", 1, 11, 3, "hi")},
			want:   changeResult{changes: []string{"c1 1/3 v=1"}, acks: []string{"e1 3"}},
		},
		{
			name:   "delete by the sender clears body and reactions; by the creator (moderation) of another's message",
			inputs: []any{changeEv(events.MessageDeleted, "e1", "c1", 1, 10, 5), changeEv(events.MessageDeleted, "e2", "c2", 1, 10, 3)},
			want: changeResult{
				msgs:    []string{`1/3 v=2 "" deleted`, `1/5 v=3 "" deleted`},
				inbox:   map[int64][]string{10: {"upd 1/5", "upd 1/3"}, 11: {"upd 1/5", "upd 1/3"}},
				changes: []string{"c1 1/5 v=3", "c2 1/3 v=2"},
				acks:    []string{"e1 5", "e2 3"},
			},
		},
		{
			name:   "delete by a member who is neither the sender nor the creator",
			inputs: []any{changeEv(events.MessageDeleted, "e1", "c1", 1, 11, 5)},
			want:   changeResult{rejects: []string{"e1 not_sender c1"}},
		},
		{
			name: "a burst of reactions on one message: one update per member, the version counts every change",
			inputs: []any{reacted("e1", "c1", 1, 10, 5, "👍"), reacted("e2", "c2", 1, 11, 5, "🎉"),
				reacted("e3", "c3", 1, 10, 5, "👍"), changeEv(events.ReactionRemoved, "e4", "c4", 1, 10, 5),
				changeEv(events.ReactionRemoved, "e5", "c5", 1, 10, 5)},
			want: changeResult{
				msgs:    []string{`1/5 v=5 "yo" 🎉:1 mine:10=,11=🎉`},
				inbox:   map[int64][]string{10: {"upd 1/5"}, 11: {"upd 1/5"}},
				changes: []string{"c1 1/5 v=3", "c2 1/5 v=4", "c3 1/5 v=4", "c4 1/5 v=5", "c5 1/5 v=5"},
				acks:    []string{"e1 5", "e2 5", "e3 5", "e4 5", "e5 5"},
			},
		},
		{
			name: "at most 20 distinct emoji; replacing one's only emoji is not a new one",
			state: func() state {
				s := base()
				m := s.messages[[2]int64{1, 5}]
				m.reactions = map[string]int64{}
				for i := range projection.MaxDistinctReactions {
					m.reactions[fmt.Sprintf("e%02d", i)] = 1
				}
				s.messages[[2]int64{1, 5}] = m
				s.reactions = map[[3]int64]string{{1, 5, 11}: "e00"}
				return s
			}(),
			inputs: []any{reacted("e1", "c1", 1, 10, 5, "new"), reacted("e2", "c2", 1, 11, 5, "new")},
			want: changeResult{
				msgs: []string{`1/5 v=3 "yo" e01:1,e02:1,e03:1,e04:1,e05:1,e06:1,e07:1,e08:1,e09:1,e10:1,e11:1,e12:1,e13:1,` +
					`e14:1,e15:1,e16:1,e17:1,e18:1,e19:1,new:1 mine:11=new`},
				inbox:   map[int64][]string{10: {"upd 1/5"}, 11: {"upd 1/5"}},
				changes: []string{"c2 1/5 v=3"},
				rejects: []string{"e1 too_many_reactions c1"},
				acks:    []string{"e2 5"},
			},
		},
		{
			name:   "a reaction on a deleted message is refused; removing none changes nothing",
			inputs: []any{reacted("e1", "c1", 1, 10, 6, "👍"), changeEv(events.ReactionRemoved, "e2", "c2", 1, 10, 3)},
			want: changeResult{
				changes: []string{"c2 1/3 v=1"},
				rejects: []string{"e1 deleted c1"},
				acks:    []string{"e2 3"},
			},
		},
		{
			name: "a reply, an edit and a reaction of a message sent in the same batch",
			inputs: []any{func() any { e := sent("e1", "m1", 1, 11, "re"); e.ReplyTo = 3; return e }(),
				edited("e2", "c2", 1, 11, 7, "re!"), reacted("e3", "c3", 1, 12, 7, "👍")},
			want: changeResult{
				msgs:    []string{`1/7 v=3 "re!" 👍:1 mine:12=👍 reply_to=3`},
				inbox:   map[int64][]string{10: {"upd 1/7"}, 11: {"upd 1/7"}, 12: {"upd 1/7"}},
				changes: []string{"c2 1/7 v=2", "c3 1/7 v=3"},
				acks:    []string{"e2 7", "e3 7"},
			},
		},
		{
			name:   "a reply to a seq that does not exist, or from before the sender joined",
			inputs: []any{func() any { e := sent("e1", "m1", 1, 11, "re"); e.ReplyTo = 9; return e }(), func() any { e := sent("e2", "m2", 1, 12, "re"); e.ReplyTo = 3; return e }()},
			want:   changeResult{rejects: []string{"e1 no_message m1", "e2 no_message m2"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.state
			if st.convs == nil {
				st = base()
			}
			b := runRules(t, st, tc.inputs)
			require.Equal(t, tc.want, summarizeChanges(b))
			for _, f := range b.fan {
				if f.kind == projection.KindUpdate {
					require.Same(t, b.msgStates[msgKey{f.conv, f.seq}], f.msg)
				}
			}
		})
	}
}
