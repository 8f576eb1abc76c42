package projector_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/projector"
)

// largeLog is a conversation that grows past a threshold of 4 members,
// lives in read fan-out (reads arm, a mention reaches its user, a change
// writes no update entry), and shrinks back to write fan-out; and a
// channel, in read fan-out from its first seq.
func largeLog() []*events.Event {
	var log []*events.Event
	ev := func(typ string, conv, actor int64, set func(e *events.Event)) {
		e := events.New(typ, conv, actor)
		if set != nil {
			set(e)
		}
		log = append(log, e)
	}
	send := func(conv, actor int64, text string, mentions ...int64) {
		ev(events.MessageSent, conv, actor, func(e *events.Event) {
			e.MsgID, e.Body, e.Mentions = uuid.NewString(), &text, mentions
		})
	}
	member := func(typ string, conv, actor, user int64) {
		ev(typ, conv, actor, func(e *events.Event) { e.UserID = user })
	}
	ev(events.ConversationCreated, 1, 10, func(e *events.Event) { e.Members = []int64{11, 12} }) // seq 1, 3 members
	member(events.MemberAdded, 1, 10, 13)                                                        // seq 2, 4
	member(events.MemberAdded, 1, 10, 14)                                                        // seq 3, 5 > 4: read from seq 4
	send(1, 10, "read mode")                                                                     // seq 4: nobody armed
	ev(events.ReadUpdated, 1, 11, func(e *events.Event) { e.ReadSeq = events.Ptr(int64(4)) })    // 11 read to the end: armed
	send(1, 12, "hi @13", 13)                                                                    // seq 5: 11 (armed) and 13 (mentioned)
	send(1, 10, "after")                                                                         // seq 6: nobody (11 disarmed)
	ev(events.MessageEdited, 1, 10, func(e *events.Event) {
		e.Seq, e.ChangeID, e.Body = 4, uuid.NewString(), events.Ptr("read mode, edited")
	})
	ev(events.ReactionAdded, 1, 11, func(e *events.Event) { e.Seq, e.ChangeID, e.Emoji = 4, uuid.NewString(), "👍" })
	member(events.MemberRemoved, 1, 10, 14) // seq 7, 4 members: still read (down at 2)
	member(events.MemberRemoved, 1, 10, 13) // seq 8, 3
	member(events.MemberRemoved, 1, 10, 12) // seq 9, 2: write from seq 9 (this removal goes to all)
	send(1, 11, "write again")              // seq 10: 10 and 11
	ev(events.ConversationCreated, 2, 20, func(e *events.Event) { e.Members = []int64{21}; e.Channel = true })
	send(2, 20, "channel post") // seq 2: nobody
	return log
}

// applyLog applies log with batches of size n, as a live fanout (n small)
// or a replay (n large) would cut it.
func applyLog(t *testing.T, ctx context.Context, pool *pgxpool.Pool, log []*events.Event, n int) {
	p, err := projector.New(projector.Config{Topic: "t", LargeThreshold: 4}, pool)
	require.NoError(t, err)
	for i := 0; i < len(log); i += n {
		var recs []projector.Record
		for j := i; j < min(i+n, len(log)); j++ {
			recs = append(recs, projector.Record{Partition: 0, Offset: int64(j), Event: log[j]})
		}
		_, err := p.Apply(ctx, recs)
		require.NoError(t, err)
	}
}

// dump is the projection's rows that read fan-out decides, as text.
func dump(t *testing.T, ctx context.Context, pool *pgxpool.Pool) map[string][]string {
	out := map[string][]string{}
	for name, q := range map[string]string{
		"inbox":   `SELECT user_id || ':' || inbox_seq || ' ' || conversation_id || '/' || seq || ' kind ' || kind FROM inbox WHERE kind <> 2 ORDER BY user_id, inbox_seq`,
		"records": `SELECT user_id || ' in ' || conversation_id || ' read ' || read_seq || ' armed ' || armed FROM records ORDER BY user_id, conversation_id`,
		"modes":   `SELECT conversation_id || ' from ' || from_seq || ' read ' || read_fanout FROM conversation_modes ORDER BY 1`,
		"convs":   `SELECT id || ' last ' || last_seq || ' read ' || read_fanout || ' members ' || member_count || ' changes ' || change_count FROM conversations ORDER BY id`,
		"changed": `SELECT conversation_id || '/' || seq || ' v' || version || ' ord ' || changed_ord FROM messages WHERE version > 1 ORDER BY 1`,
	} {
		rows, err := pool.Query(ctx, q)
		require.NoError(t, err)
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out[name] = append(out[name], s)
		}
		require.NoError(t, rows.Err())
	}
	return out
}

// TestReadFanout: the rules of docs/large-conversations.md on a real
// database, the same whether the log is applied one record at a time or
// in one batch (what a replay does), with I1–I8, M, C and L checks holding.
func TestReadFanout(t *testing.T) {
	ctx := context.Background()
	log := largeLog()
	var dumps []map[string][]string
	for _, n := range []int{1, 3, len(log)} {
		pool, _ := pgtest.NewPool(t)
		applyLog(t, ctx, pool, log, n)
		rep, err := projector.Verify(ctx, pool)
		require.NoError(t, err)
		require.True(t, rep.OK(), "batches of %d: %v", n, rep)
		dumps = append(dumps, dump(t, ctx, pool))
	}
	require.Equal(t, dumps[0], dumps[1], "batches of 1 and of 3 project the same")
	require.Equal(t, dumps[0], dumps[2], "batches of 1 and one batch project the same")
	d := dumps[0]
	require.Equal(t, []string{"1 from 1 read false", "1 from 4 read true", "1 from 9 read false", "2 from 1 read true"}, d["modes"])
	require.Equal(t, []string{"1 last 10 read false members 2 changes 2", "2 last 2 read true members 2 changes 0"}, d["convs"])
	require.Equal(t, []string{"1/4 v3 ord 2"}, d["changed"], "two changes in read mode: no update entries, changed_ord 2")

	entries := func(user int64) string {
		var of []string
		for _, s := range d["inbox"] {
			if strings.HasPrefix(s, fmt.Sprint(user)+":") {
				of = append(of, s[strings.Index(s, " ")+1:])
			}
		}
		return strings.Join(of, ", ")
	}
	// Write fan-out up to seq 3 (the join that crossed is the last), then
	// only armed, mentioned, joining and leaving members, then write again.
	require.Equal(t, "1/1 kind 1, 1/2 kind 1, 1/3 kind 1, 1/9 kind 1, 1/10 kind 1", entries(10), "the removal that switches down goes to all")
	require.Equal(t, "1/1 kind 1, 1/2 kind 1, 1/3 kind 1, 1/5 kind 1, 1/9 kind 1, 1/10 kind 1", entries(11), "armed by its read: seq 5, not 6")
	require.Equal(t, "1/1 kind 1, 1/2 kind 1, 1/3 kind 1, 1/9 kind 1", entries(12), "its removal")
	require.Equal(t, "1/2 kind 1, 1/3 kind 1, 1/5 kind 1, 1/8 kind 1", entries(13), "mentioned at seq 5, then its removal")
	require.Equal(t, "1/3 kind 1, 1/7 kind 1", entries(14))
	require.Equal(t, "", entries(20), "a channel: its members learn of it by their record entries; no message entry")
	require.Equal(t, "", entries(21))
	require.Contains(t, d["records"], "11 in 1 read 10 armed false", "disarmed by seq 5 (its own send moved it to 10)")
}

// TestVerifyLargeRules: the checks changed or added for read fan-out fail
// when their rule is broken: a write fan-out entry missing (I3), a read
// position below the member's own message (C2), modes that repeat (L1), a
// wrong member count (L2), an armed non-member (L3), a changed_ord beyond
// the change count (L4). (That a read-mode message is owed to nobody's
// inbox is TestReadFanout's: verify passes on it.)
func TestVerifyLargeRules(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewPool(t)
	applyLog(t, ctx, pool, largeLog(), 1)
	for _, tc := range []struct{ inv, corrupt string }{
		{"I3", `DELETE FROM inbox WHERE user_id = 12 AND conversation_id = 1 AND seq = 2 AND kind = 1`},
		{"C2", `UPDATE records SET read_seq = 3 WHERE user_id = 11 AND conversation_id = 1`},
		{"L1", `INSERT INTO conversation_modes VALUES (1, 11, false)`},
		{"L2", `UPDATE conversations SET member_count = 7 WHERE id = 2`},
		{"L3", `UPDATE records SET armed = true WHERE user_id = 14 AND conversation_id = 1`},
		{"L4", `UPDATE conversations SET change_count = 1 WHERE id = 1`},
	} {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, tc.corrupt)
		var rep projector.Report
		if err == nil {
			rep, err = projector.Verify(ctx, tx)
		}
		require.NoError(t, tx.Rollback(ctx)) // before any assertion: a failed one must not hold the connection
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
