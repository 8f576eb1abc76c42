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

// settingsLog renames, freezes and sets the slow mode of a conversation
// with roles, with writes judged at their log position around the freeze.
func settingsLog() []*events.Event {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var log []*events.Event
	ev := func(typ string, actor int64, set func(e *events.Event)) {
		e := events.New(typ, 1, actor)
		if set != nil {
			set(e)
		}
		e.At = t0.Add(time.Duration(len(log)) * time.Second)
		log = append(log, e)
	}
	update := func(actor int64, title string, frozen *bool, slow *int) {
		ev(events.ConversationUpdated, actor, func(e *events.Event) { e.Title, e.Frozen, e.SlowMode = title, frozen, slow })
	}
	send := func(actor int64) {
		ev(events.MessageSent, actor, func(e *events.Event) { e.MsgID, e.Body = uuid.NewString(), events.Ptr("hi") })
	}
	ev(events.ConversationCreated, 10, func(e *events.Event) { e.Title, e.Members, e.Roles = "first", []int64{11, 12, 13}, true }) // seq 1
	ev(events.MemberRoleSet, 10, func(e *events.Event) { e.UserID, e.Role = 11, events.RoleAdmin })                                // seq 2
	ev(events.MemberRoleSet, 10, func(e *events.Event) { e.UserID, e.Role = 12, events.RoleModerator })                            // seq 3
	update(13, "mine", nil, nil)                                                                                                   // refused: role
	update(11, "second", nil, nil)                                                                                                 // seq 4
	update(12, "", events.Ptr(true), nil)                                                                                          // refused: role
	update(12, "", nil, events.Ptr(30))                                                                                            // seq 5
	update(11, "", events.Ptr(true), nil)                                                                                          // seq 6
	send(13)                                                                                                                       // refused: frozen
	send(12)                                                                                                                       // refused: frozen
	send(11)                                                                                                                       // seq 7
	update(10, "second", events.Ptr(true), nil)                                                                                    // nothing changes
	update(10, "", events.Ptr(false), events.Ptr(0))                                                                               // seq 8
	send(13)                                                                                                                       // seq 9
	update(10, "", events.Ptr(true), nil)                                                                                          // seq 10: frozen at the end
	return log
}

// settingsDump is the projection's settings, messages and refusals, as text.
func settingsDump(t *testing.T, ctx context.Context, pool *pgxpool.Pool) map[string][]string {
	return dumpRows(t, ctx, pool, map[string]string{
		"convs":   `SELECT id || ' ' || title || ' frozen ' || frozen || ' slow ' || slow_mode || ' last ' || last_seq FROM conversations ORDER BY id`,
		"system":  `SELECT seq || ' ' || body FROM messages WHERE kind = 'system' AND body LIKE '%conversation.updated%' ORDER BY seq`,
		"refused": `SELECT event_type || ' by ' || actor_id || ': ' || reason FROM rejections ORDER BY "offset"`,
		// A member's record has a version for each change of its
		// settings (and of its role) since the last one it had.
		"records": `SELECT user_id || ' v' || version FROM records ORDER BY user_id`,
	})
}

// TestSettingsProjected: renames, freezes and slow modes on a real
// database, the same whatever the cut of the log into batches, with
// every invariant (F1 among them) holding.
func TestSettingsProjected(t *testing.T) {
	d := projectedAlike(t, settingsLog(), settingsDump)
	require.Equal(t, []string{"1 second frozen true slow 0 last 10"}, d["convs"])
	require.Equal(t, []string{
		`4 {"by": 11, "event": "conversation.updated", "title": "second"}`,
		`5 {"by": 12, "event": "conversation.updated", "slow_mode": 30}`,
		`6 {"by": 11, "event": "conversation.updated", "frozen": true}`,
		`8 {"by": 10, "event": "conversation.updated", "frozen": false, "slow_mode": 0}`,
		`10 {"by": 10, "event": "conversation.updated", "frozen": true}`,
	}, normalizeJSON(t, d["system"]))
	require.Equal(t, []string{
		"conversation.updated by 13: role", "conversation.updated by 12: role",
		"message.sent by 13: frozen", "message.sent by 12: frozen",
	}, d["refused"])
	// Creation 1, five settings changes 5; 11 and 12 had a role set too.
	require.Equal(t, []string{"10 v6", "11 v7", "12 v7", "13 v6"}, d["records"])
}

// normalizeJSON rewrites "seq body" lines with the body as PostgreSQL's
// jsonb prints it (sorted keys), so that the order the projector wrote
// the keys in does not matter.
func normalizeJSON(t *testing.T, lines []string) []string {
	t.Helper()
	pool, _ := pgtest.NewPool(t)
	out := make([]string, len(lines))
	for i, l := range lines {
		var seq, body string
		for j := range l {
			if l[j] == ' ' {
				seq, body = l[:j], l[j+1:]
				break
			}
		}
		var norm string
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT $1::jsonb::text`, body).Scan(&norm))
		out[i] = seq + " " + norm
	}
	return out
}

// TestVerifySettings: F1 fails when a conversation's settings are not
// what its messages last set.
func TestVerifySettings(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewPool(t)
	applyLog(t, ctx, pool, settingsLog(), 1)
	requireVerified(t, pool)
	for _, corrupt := range []string{
		`UPDATE conversations SET frozen = false WHERE id = 1`,
		`UPDATE conversations SET slow_mode = 30 WHERE id = 1`,
		`UPDATE conversations SET title = 'first' WHERE id = 1`,
	} {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, corrupt)
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
		require.Equal(t, []string{"F1"}, failed, corrupt)
	}
}
