package projector_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
)

// sanctionsLog bans and mutes in a conversation that goes to read fan-out
// (threshold 4, applyLog) after its second join, with a ban that lapses.
func sanctionsLog() []*events.Event {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var log []*events.Event
	ev := func(typ string, conv, actor int64, d time.Duration, set func(e *events.Event)) {
		e := events.New(typ, conv, actor)
		if set != nil {
			set(e)
		}
		e.At = t0.Add(d)
		log = append(log, e)
	}
	member := func(typ string, actor, user int64, d time.Duration, until *time.Time) {
		ev(typ, 1, actor, d, func(e *events.Event) { e.UserID, e.Until = user, until })
	}
	send := func(actor int64, d time.Duration) {
		ev(events.MessageSent, 1, actor, d, func(e *events.Event) { e.MsgID, e.Body = uuid.NewString(), events.Ptr("hi") })
	}
	hour := t0.Add(time.Hour)
	ev(events.ConversationCreated, 1, 10, 0, func(e *events.Event) { e.Members, e.Roles = []int64{11, 12}, true }) // seq 1
	member(events.MemberAdded, 10, 13, 0, nil)                                                                     // seq 2
	member(events.MemberAdded, 10, 14, 0, nil)                                                                     // seq 3: read from 4
	ev(events.MemberRoleSet, 1, 10, 0, func(e *events.Event) { e.UserID, e.Role = 11, events.RoleModerator })      // seq 4
	member(events.MemberBanned, 11, 13, 0, &hour)                                                                  // seq 5: 13 leaves
	member(events.MemberAdded, 10, 13, time.Minute, nil)                                                           // refused: banned
	member(events.MemberMuted, 11, 14, 0, nil)                                                                     // seq 6
	send(14, time.Minute)                                                                                          // refused: muted
	member(events.MemberBanned, 11, 10, 0, nil)                                                                    // refused: the owner
	member(events.MemberAdded, 10, 13, 2*time.Hour, nil)                                                           // seq 7: lapsed
	member(events.MemberUnmuted, 11, 14, 2*time.Hour, nil)                                                         // seq 8
	send(14, 2*time.Hour)                                                                                          // seq 9
	member(events.MemberBanned, 10, 20, 2*time.Hour, nil)                                                          // seq 10: in advance
	member(events.MemberMuted, 11, 12, 2*time.Hour, nil)                                                           // seq 11
	return log
}

// sanctionsDump is the projection's sanctions, spans and refusals, as text.
func sanctionsDump(t *testing.T, ctx context.Context, pool *pgxpool.Pool) map[string][]string {
	return dumpRows(t, ctx, pool, map[string]string{
		"sanctions": `SELECT conversation_id || '/' || user_id || ' ' || kind || ' by ' || set_by || coalesce(' until ' || to_char(until AT TIME ZONE 'UTC', 'HH24:MI'), '')
FROM sanctions ORDER BY 1`,
		"spans":   `SELECT conversation_id || '/' || user_id || ' ' || joined_seq || '-' || coalesce(left_seq::text, '') FROM member_spans ORDER BY conversation_id, user_id, joined_seq`,
		"refused": `SELECT conversation_id || ' ' || event_type || ' by ' || actor_id || ': ' || reason FROM rejections ORDER BY "offset"`,
	})
}

// TestSanctionsProjected: bans and mutes on a real database, the same
// whatever the cut of the log into batches, with every invariant holding,
// in read fan-out too.
func TestSanctionsProjected(t *testing.T) {
	d := projectedAlike(t, sanctionsLog(), sanctionsDump)
	require.Equal(t, []string{"1/12 mute by 11", "1/13 ban by 11 until 04:04", "1/20 ban by 10"}, d["sanctions"])
	require.Equal(t, []string{"1/10 1-", "1/11 1-", "1/12 1-", "1/13 2-5", "1/13 7-", "1/14 3-"}, d["spans"])
	require.Equal(t, []string{"1 member.added by 10: banned", "1 message.sent by 14: muted", "1 member.banned by 11: role"}, d["refused"])
}
