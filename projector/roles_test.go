package projector

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

func roleSet(id string, c, actor, user int64, role string) *events.Event {
	e := ev(events.MemberRoleSet, id, c, actor)
	e.UserID, e.Role = user, role
	return e
}

func deleted(id string, c, actor, seq int64) *events.Event {
	e := ev(events.MessageDeleted, id, c, actor)
	e.ChangeID, e.Seq = id, seq
	return e
}

// roleSummary is what the batch leaves of the roles of conversation c:
// "owner=N roles=[u:role ...] set=[u:role ...] new=[u:role ...]" (set:
// the roles written on spans open before the batch; new: the roles of
// the spans it opened), and the reasons of its rejections in order.
func roleSummary(b *batch, c int64) (string, []string) {
	cs := b.convs[c]
	list := func(m map[int64]string) []string {
		var out []string
		for u, r := range m {
			out = append(out, fmt.Sprintf("%d:%s", u, r))
		}
		slices.Sort(out)
		return out
	}
	set := map[int64]string{}
	for k, r := range b.spanRoles {
		if k.conv == c {
			set[k.user] = r
		}
	}
	var opened []string
	for _, s := range b.newSpans {
		if s.conv == c {
			opened = append(opened, fmt.Sprintf("%d:%s", s.user, s.role))
		}
	}
	slices.Sort(opened)
	var reasons []string
	for _, r := range b.rejects {
		reasons = append(reasons, r.eventID+" "+r.reason)
	}
	return fmt.Sprintf("owner=%d roles=%v set=%v new=%v", cs.owner, list(cs.roles), list(set), opened), reasons
}

// staff is an enforced conversation of an owner (10), an admin (11), a
// moderator (12) and two members (13, 14), with a message of 13 at seq 5
// and of 12 at seq 6.
func staff() state {
	return state{
		convs: map[int64]conv{1: {last: 6, members: []int64{10, 11, 12, 13, 14}, by: 10, enforced: true, owner: 10,
			roles: map[int64]string{10: events.RoleOwner, 11: events.RoleAdmin, 12: events.RoleModerator}}},
		messages: map[[2]int64]msg0{{1, 5}: {sender: 13, body: "a"}, {1, 6}: {sender: 12, body: "b"}},
	}
}

// TestRoleAuthorization is the table of who may do what to whom, judged
// by the projection: owner 10, admin 11, moderator 12, member 13 and an
// outsider 99, acting on the member 14 (or the member 13's message).
func TestRoleAuthorization(t *testing.T) {
	const owner, admin, mod, member, outsider = 10, 11, 12, 13, 99
	actors := []int64{owner, admin, mod, member, outsider}
	for _, tc := range []struct {
		name string
		make func(actor int64) *events.Event
		// want is the rejection reason per actor ("" applied).
		want map[int64]string
	}{
		{"add a member", func(a int64) *events.Event { return added("e", 1, a, 20) },
			map[int64]string{mod: projection.ReasonRole, member: projection.ReasonRole, outsider: projection.ReasonNotMember}},
		{"remove a member", func(a int64) *events.Event { return removed("e", 1, a, 14) },
			map[int64]string{mod: projection.ReasonRole, member: projection.ReasonRole, outsider: projection.ReasonNotMember}},
		{"remove the moderator", func(a int64) *events.Event { return removed("e", 1, a, mod) },
			map[int64]string{mod: "", member: projection.ReasonRole, outsider: projection.ReasonNotMember}}, // the moderator leaves
		{"remove the admin", func(a int64) *events.Event { return removed("e", 1, a, admin) },
			map[int64]string{mod: projection.ReasonRole, member: projection.ReasonRole, outsider: projection.ReasonNotMember}},
		{"remove the owner", func(a int64) *events.Event { return removed("e", 1, a, owner) },
			map[int64]string{admin: projection.ReasonRole, mod: projection.ReasonRole, member: projection.ReasonRole,
				outsider: projection.ReasonNotMember}},
		{"make a member a moderator", func(a int64) *events.Event { return roleSet("e", 1, a, 14, events.RoleModerator) },
			map[int64]string{mod: projection.ReasonRole, member: projection.ReasonRole, outsider: projection.ReasonNotMember}},
		{"make a member an admin", func(a int64) *events.Event { return roleSet("e", 1, a, 14, events.RoleAdmin) },
			map[int64]string{admin: projection.ReasonRole, mod: projection.ReasonRole, member: projection.ReasonRole,
				outsider: projection.ReasonNotMember}},
		{"demote the admin", func(a int64) *events.Event { return roleSet("e", 1, a, admin, events.RoleMember) },
			map[int64]string{admin: projection.ReasonRole /* its own role */, mod: projection.ReasonRole,
				member: projection.ReasonRole, outsider: projection.ReasonNotMember}},
		{"delete another's message", func(a int64) *events.Event { return deleted("c0000000-0000-0000-0000-000000000001", 1, a, 5) },
			map[int64]string{member: "", admin: "", mod: "", outsider: projection.ReasonNotMember}}, // 13 sent it
		{"delete the moderator's message", func(a int64) *events.Event {
			return deleted("c0000000-0000-0000-0000-000000000001", 1, a, 6)
		}, map[int64]string{member: projection.ReasonNotSender, outsider: projection.ReasonNotMember}},
	} {
		for _, a := range actors {
			t.Run(fmt.Sprintf("%s/by %d", tc.name, a), func(t *testing.T) {
				e := tc.make(a)
				b := runRules(t, staff(), []any{e})
				_, reasons := roleSummary(b, 1)
				if want := tc.want[a]; want != "" {
					require.Equal(t, []string{e.EventID + " " + want}, reasons)
					require.Equal(t, int64(6), b.convs[1].lastSeq, "a refusal changes nothing")
					return
				}
				require.Empty(t, reasons)
				if e.Type != events.MessageDeleted {
					require.Equal(t, int64(7), b.convs[1].lastSeq, "a system message")
				} else {
					require.True(t, b.msgStates[msgKey{1, e.Seq}].deleted)
				}
			})
		}
	}
}

func TestRoleRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		state   state
		inputs  []any
		want    string
		rejects []string
	}{
		{
			name:   "the creator owns a conversation it creates",
			inputs: []any{func() *events.Event { e := created("e1", 1, 10, "t", 11); e.Roles = true; return e }()},
			want:   "owner=10 roles=[10:owner] set=[] new=[10:owner 11:member]",
		},
		{
			name:   "a service's conversation has no owner until one is set",
			inputs: []any{created("e1", 1, 0, "t", 11, 12), roleSet("e2", 1, 0, 12, events.RoleOwner)},
			want:   "owner=12 roles=[12:owner] set=[] new=[11:member 12:owner]",
		},
		{
			name:   "the owner transfers ownership and becomes an admin",
			state:  staff(),
			inputs: []any{roleSet("e1", 1, 10, 13, events.RoleOwner)},
			want:   "owner=13 roles=[10:admin 11:admin 12:moderator 13:owner] set=[10:admin 13:owner] new=[]",
		},
		{
			name:   "setting the role a member has changes nothing",
			state:  staff(),
			inputs: []any{roleSet("e1", 1, 10, 12, events.RoleModerator)},
			want:   "owner=10 roles=[10:owner 11:admin 12:moderator] set=[] new=[]",
		},
		{
			name:    "a role for a user who is no member",
			state:   staff(),
			inputs:  []any{roleSet("e1", 1, 10, 50, events.RoleModerator)},
			want:    "owner=10 roles=[10:owner 11:admin 12:moderator] set=[] new=[]",
			rejects: []string{"e1 no_member"},
		},
		{
			name:  "a role change racing a removal: the removal first, the role is refused",
			state: staff(),
			inputs: []any{removed("e1", 1, 11, 13), roleSet("e2", 1, 10, 13, events.RoleModerator),
				sent("e3", "m3", 1, 13, "still here?")},
			want:    "owner=10 roles=[10:owner 11:admin 12:moderator] set=[] new=[]",
			rejects: []string{"e2 no_member", "e3 not_member"},
		},
		{
			name:   "a role change racing a removal: the role first, the span leaves with it",
			state:  staff(),
			inputs: []any{roleSet("e1", 1, 10, 13, events.RoleModerator), removed("e2", 1, 11, 13)},
			want:   "owner=10 roles=[10:owner 11:admin 12:moderator] set=[13:moderator] new=[]",
		},
		{
			name:  "a member removed and added again starts as a member",
			state: staff(),
			inputs: []any{roleSet("e1", 1, 10, 14, events.RoleModerator), removed("e2", 1, 10, 14), added("e3", 1, 10, 14),
				roleSet("e4", 1, 11, 14, events.RoleModerator)},
			want: "owner=10 roles=[10:owner 11:admin 12:moderator 14:moderator] set=[14:moderator] new=[14:moderator]",
		},
		{
			name:   "an owner who leaves leaves no owner; an admin then cannot make one",
			state:  staff(),
			inputs: []any{removed("e1", 1, 10, 10), roleSet("e2", 1, 11, 12, events.RoleOwner), roleSet("e3", 1, 0, 11, events.RoleOwner)},
			want:   "owner=11 roles=[11:owner 12:moderator] set=[11:owner] new=[]", rejects: []string{"e2 role"},
		},
		{
			name: "a service makes an owner the batch did not load (read mode): the one before is demoted by id",
			state: state{convs: map[int64]conv{1: {last: 6, members: []int64{12}, enforced: true, owner: 10,
				roles: map[int64]string{}}}},
			inputs: []any{roleSet("e1", 1, 0, 12, events.RoleOwner)},
			want:   "owner=12 roles=[10:admin 12:owner] set=[10:admin 12:owner] new=[]",
		},
		{
			name: "a conversation created before roles: any member adds and removes, the creator deletes",
			state: state{convs: map[int64]conv{1: {last: 6, members: []int64{10, 13, 14}, by: 10, owner: 10,
				roles: map[int64]string{10: events.RoleOwner}}},
				messages: map[[2]int64]msg0{{1, 5}: {sender: 13, body: "a"}}},
			inputs: []any{added("e1", 1, 13, 20), removed("e2", 1, 14, 10), deleted("c0000000-0000-0000-0000-000000000001", 1, 14, 5),
				roleSet("e4", 1, 13, 14, events.RoleAdmin)},
			want:    "owner=0 roles=[] set=[] new=[20:member]",
			rejects: []string{"c0000000-0000-0000-0000-000000000001 not_sender", "e4 role"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := runRules(t, tc.state, tc.inputs)
			got, rejects := roleSummary(b, 1)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.rejects, rejects)
		})
	}
}

// TestRoleSetMessage: a role change is a system message every member
// gets; in a transfer it names the owner it replaces.
func TestRoleSetMessage(t *testing.T) {
	b := runRules(t, staff(), []any{roleSet("e1", 1, 10, 13, events.RoleOwner)})
	res := summarize(b)
	require.Equal(t, []string{`1/7 system e1 10 {"by":10,"event":"member.role_set","previous_owner":10,"role":"owner","user_id":13}`}, res.msgs)
	for _, u := range []int64{10, 11, 12, 13, 14} {
		require.Equal(t, []string{"msg 1/7"}, res.inbox[u], "user %d", u)
	}
}
