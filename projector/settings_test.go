package projector

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

func updated(id string, c, actor int64, title string, frozen *bool, slow *int) *events.Event {
	e := ev(events.ConversationUpdated, id, c, actor)
	e.Title, e.Frozen, e.SlowMode = title, frozen, slow
	return e
}

func reasonsOf(b *batch) []string {
	var out []string
	for _, r := range b.rejects {
		out = append(out, r.eventID+" "+r.reason)
	}
	return out
}

// TestSettingsAuthorization is who may rename, freeze and set the slow
// mode: owner 10, admin 11, moderator 12, member 13 and an outsider 99,
// with roles enforced and without (only renaming depends on it), and a
// service as itself (actor 0) any.
func TestSettingsAuthorization(t *testing.T) {
	const owner, admin, mod, member, outsider = 10, 11, 12, 13, 99
	for _, enforced := range []bool{true, false} {
		renameBy := map[int64]string{mod: projection.ReasonRole, member: projection.ReasonRole, outsider: projection.ReasonNotMember}
		if !enforced {
			renameBy = map[int64]string{outsider: projection.ReasonNotMember}
		}
		for _, tc := range []struct {
			name string
			make func(actor int64) *events.Event
			want map[int64]string // rejection reason per actor ("" applied)
		}{
			{"rename", func(a int64) *events.Event { return updated("e", 1, a, "new", nil, nil) }, renameBy},
			{"freeze", func(a int64) *events.Event { return updated("e", 1, a, "", events.Ptr(true), nil) },
				map[int64]string{mod: projection.ReasonRole, member: projection.ReasonRole, outsider: projection.ReasonNotMember}},
			{"slow mode", func(a int64) *events.Event { return updated("e", 1, a, "", nil, events.Ptr(30)) },
				map[int64]string{member: projection.ReasonRole, outsider: projection.ReasonNotMember}},
			{"slow mode and freeze", func(a int64) *events.Event { return updated("e", 1, a, "", events.Ptr(true), events.Ptr(30)) },
				map[int64]string{mod: projection.ReasonRole, member: projection.ReasonRole, outsider: projection.ReasonNotMember}},
		} {
			for _, a := range []int64{owner, admin, mod, member, outsider, 0} {
				t.Run(fmt.Sprintf("enforced %v/%s/by %d", enforced, tc.name, a), func(t *testing.T) {
					st := staff()
					c := st.convs[1]
					c.enforced = enforced
					st.convs[1] = c
					e := tc.make(a)
					if a == 0 {
						e.Service = "k1:bot"
					}
					b := runRules(t, st, []any{e})
					if want := tc.want[a]; want != "" {
						require.Equal(t, []string{"e " + want}, reasonsOf(b))
						require.Empty(t, b.msgs)
						return
					}
					require.Empty(t, reasonsOf(b))
					require.Len(t, b.msgs, 1, "one system message")
					cs := b.convs[1]
					if e.Title != "" {
						require.Equal(t, "new", cs.title)
					}
					if e.Frozen != nil {
						require.True(t, cs.frozen)
					}
					if e.SlowMode != nil {
						require.Equal(t, 30, cs.slowMode)
					}
				})
			}
		}
	}
}

// TestSettingsChanges: only what changes is in the system message; an
// update that changes nothing makes none; a change gives every member's
// loaded record a version (a record entry).
func TestSettingsChanges(t *testing.T) {
	st := staff()
	b := runRules(t, st, []any{
		updated("a", 1, 10, "", events.Ptr(false), events.Ptr(0)), // as it is: nothing
		updated("b", 1, 10, "t", events.Ptr(true), nil),
		updated("c", 1, 10, "t", events.Ptr(true), events.Ptr(5)), // only the slow mode changes
	})
	require.Empty(t, reasonsOf(b))
	require.Len(t, b.msgs, 2)
	require.JSONEq(t, `{"event":"conversation.updated","by":10,"title":"t","frozen":true}`, b.msgs[0].body)
	require.JSONEq(t, `{"event":"conversation.updated","by":10,"slow_mode":5}`, b.msgs[1].body)
	// The records of this state are not loaded: none is written from nothing.
	for _, f := range b.fan {
		require.NotEqual(t, projection.KindRecord, f.kind, "user %d", f.user)
	}
	b = newBatchWithRecords(t, st, updated("d", 1, 11, "", nil, events.Ptr(9)))
	records := map[int64]int{}
	for _, f := range b.fan {
		if f.kind == projection.KindRecord {
			records[f.user]++
		}
	}
	require.Equal(t, map[int64]int{10: 1, 11: 1, 12: 1, 13: 1, 14: 1}, records, "one record entry per member")
}

// newBatchWithRecords runs e on st with every member's record loaded, as
// the database would for a conversation.updated (sqlMembersRecords).
func newBatchWithRecords(t *testing.T, st state, e *events.Event) *batch {
	t.Helper()
	st.records = map[[2]int64]rec0{}
	for _, u := range st.convs[1].members {
		st.records[[2]int64{u, 1}] = rec0{read: 1}
	}
	return runRules(t, st, []any{e})
}

// TestFrozenRefuses: in a frozen conversation the writes of members below
// admin are refused (frozen), an admin's and the owner's and a service's
// are not; reading and leaving are untouched.
func TestFrozenRefuses(t *testing.T) {
	const owner, admin, mod, member = 10, 11, 12, 13
	writes := map[string]func(a int64, id string) *events.Event{
		"send": func(a int64, id string) *events.Event {
			return sent(id, fmt.Sprintf("00000000-0000-4000-8000-0000000000%02d", a), 1, a, "hi")
		},
		"edit": func(a int64, id string) *events.Event {
			return edited(id, "00000000-0000-4000-8000-00000000aa01", 1, a, 5, "b")
		},
		"delete": func(a int64, id string) *events.Event {
			return changeEv(events.MessageDeleted, id, "00000000-0000-4000-8000-00000000aa02", 1, a, 5)
		},
		"react": func(a int64, id string) *events.Event {
			return reacted(id, "00000000-0000-4000-8000-00000000aa03", 1, a, 5, "x")
		},
		"unreact": func(a int64, id string) *events.Event {
			return changeEv(events.ReactionRemoved, id, "00000000-0000-4000-8000-00000000aa04", 1, a, 5)
		},
		"add": func(a int64, id string) *events.Event { return added(id, 1, a, 30) },
	}
	for name, make := range writes {
		for _, a := range []int64{owner, admin, mod, member} {
			t.Run(fmt.Sprintf("%s by %d", name, a), func(t *testing.T) {
				st := staff()
				c := st.convs[1]
				c.enforced = false // adding is then anyone's but for the freeze
				st.convs[1] = c
				freeze := updated("f", 1, owner, "", events.Ptr(true), nil)
				e := make(a, "w")
				b := runRules(t, st, []any{freeze, e})
				got := reasonsOf(b)
				if a == mod || a == member {
					require.Equal(t, []string{"w " + projection.ReasonFrozen}, got)
					return
				}
				for _, r := range got {
					require.NotContains(t, r, projection.ReasonFrozen)
				}
			})
		}
	}
	t.Run("unfrozen again", func(t *testing.T) {
		b := runRules(t, staff(), []any{
			updated("f", 1, owner, "", events.Ptr(true), nil),
			sent("s1", "00000000-0000-4000-8000-000000000001", 1, member, "no"),
			updated("u", 1, admin, "", events.Ptr(false), nil),
			sent("s2", "00000000-0000-4000-8000-000000000002", 1, member, "yes"),
			removed("l", 1, member, member), // leaving is allowed whatever
		})
		require.Equal(t, []string{"s1 " + projection.ReasonFrozen}, reasonsOf(b))
	})
}
