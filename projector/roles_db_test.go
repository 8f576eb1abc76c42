package projector_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/projector"
)

// rolesLog exercises roles in a conversation that goes to read fan-out
// (threshold 4, applyLog) after its second join, so that most of its
// batches load only the members they name; a service's conversation that
// gets its owner later; and one created before roles.
func rolesLog() []*events.Event {
	var log []*events.Event
	ev := func(typ string, conv, actor int64, set func(e *events.Event)) {
		e := events.New(typ, conv, actor)
		if set != nil {
			set(e)
		}
		log = append(log, e)
	}
	member := func(typ string, conv, actor, user int64) {
		ev(typ, conv, actor, func(e *events.Event) { e.UserID = user })
	}
	role := func(conv, actor, user int64, r string) {
		ev(events.MemberRoleSet, conv, actor, func(e *events.Event) {
			e.UserID, e.Role = user, r
			if actor == 0 {
				e.Service = "1:svc"
			}
		})
	}
	ev(events.ConversationCreated, 1, 10, func(e *events.Event) { e.Members, e.Roles = []int64{11, 12}, true }) // seq 1
	member(events.MemberAdded, 1, 10, 13)                                                                       // seq 2
	member(events.MemberAdded, 1, 10, 14)                                                                       // seq 3: read from 4
	role(1, 10, 11, events.RoleAdmin)                                                                           // seq 4
	role(1, 11, 12, events.RoleModerator)                                                                       // seq 5
	member(events.MemberAdded, 1, 13, 15)                                                                       // refused: a member
	role(1, 10, 13, events.RoleOwner)                                                                           // seq 6: 10 is an admin
	msg := uuid.NewString()
	ev(events.MessageSent, 1, 14, func(e *events.Event) { e.MsgID, e.Body = msg, events.Ptr("spam") }) // seq 7
	ev(events.MessageDeleted, 1, 12, func(e *events.Event) { e.Seq, e.ChangeID = 7, uuid.NewString() })
	member(events.MemberRemoved, 1, 13, 10) // seq 8: the owner removes the admin it replaced
	role(1, 11, 14, events.RoleModerator)   // seq 9
	member(events.MemberRemoved, 1, 11, 14) // seq 10: an admin removes a moderator
	role(1, 11, 14, events.RoleMember)      // refused: no member
	member(events.MemberRemoved, 1, 12, 11) // refused: a moderator removes no admin
	ev(events.ConversationCreated, 2, 0, func(e *events.Event) { e.Members, e.Roles, e.Service = []int64{20, 21}, true, "1:svc" })
	member(events.MemberAdded, 2, 20, 22) // refused: no owner, no admin yet
	role(2, 0, 21, events.RoleOwner)
	member(events.MemberAdded, 2, 21, 22)
	ev(events.ConversationCreated, 3, 30, func(e *events.Event) { e.Members = []int64{31} }) // before roles
	member(events.MemberAdded, 3, 31, 32)
	member(events.MemberRemoved, 3, 32, 30) // the owner, by a member: the rules before roles
	for _, e := range log {
		e.At = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	}
	return log
}

// rolesDump is the projection's roles, owners and refusals, as text.
func rolesDump(t *testing.T, ctx context.Context, pool *pgxpool.Pool) map[string][]string {
	return dumpRows(t, ctx, pool, map[string]string{
		"spans": `SELECT conversation_id || '/' || user_id || ' ' || joined_seq || '-' || coalesce(left_seq::text, '') || ' ' || role
FROM member_spans ORDER BY conversation_id, user_id, joined_seq`,
		"convs":   `SELECT id || ' owner ' || owner_id || ' roles ' || roles || ' last ' || last_seq FROM conversations ORDER BY id`,
		"refused": `SELECT conversation_id || ' ' || event_type || ' by ' || actor_id || ': ' || reason FROM rejections ORDER BY "offset"`,
		"deleted": `SELECT conversation_id || '/' || seq FROM messages WHERE deleted ORDER BY 1`,
	})
}

// TestRolesProjected: roles on a real database, the same whatever the cut
// of the log into batches (a live fanout, a replay), with every invariant
// holding, in read fan-out too.
func TestRolesProjected(t *testing.T) {
	d := projectedAlike(t, rolesLog(), rolesDump)
	require.Equal(t, []string{
		"1/10 1-8 admin", "1/11 1- admin", "1/12 1- moderator", "1/13 2- owner", "1/14 3-10 moderator",
		"2/20 1- member", "2/21 1- owner", "2/22 3- member",
		"3/30 1-3 owner", "3/31 1- member", "3/32 2- member",
	}, d["spans"])
	require.Equal(t, []string{"1 owner 13 roles true last 10", "2 owner 21 roles true last 3", "3 owner 0 roles false last 3"}, d["convs"])
	require.Equal(t, []string{
		"1 member.added by 13: role", "1 member.role_set by 11: no_member", "1 member.removed by 12: role",
		"2 member.added by 20: role",
	}, d["refused"])
	require.Equal(t, []string{"1/7"}, d["deleted"], "a moderator deletes another's message")
}

// TestVerifyRoles: O1 and O2 fail when the owner and the spans disagree.
func TestVerifyRoles(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewPool(t)
	applyLog(t, ctx, pool, rolesLog(), 1)
	for _, tc := range []struct{ inv, corrupt string }{
		{"O1", `UPDATE member_spans SET role = 'owner' WHERE conversation_id = 1 AND user_id = 11 AND left_seq IS NULL`},
		{"O1", `UPDATE conversations SET owner_id = 12 WHERE id = 1`},
		{"O1", `UPDATE conversations SET owner_id = 0 WHERE id = 2`},
		{"O2", `UPDATE conversations SET owner_id = 0 WHERE id = 3; UPDATE member_spans SET left_seq = NULL, role = 'member' WHERE conversation_id = 3 AND user_id = 30`},
	} {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, tc.corrupt)
		var rep projector.Report
		if err == nil {
			rep, err = projector.Verify(ctx, tx)
		}
		require.NoError(t, tx.Rollback(ctx))
		require.NoError(t, err)
		var failed []string
		for _, c := range rep.Checks {
			if c.Violations > 0 {
				failed = append(failed, c.Invariant)
			}
		}
		require.Contains(t, failed, tc.inv, tc.corrupt)
	}
}
