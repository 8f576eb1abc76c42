package projector_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/projector"
)

// importedLog is a conversation imported by `inboxd import` (creation,
// messages, a join in the middle, more messages), then used live.
func importedLog(importedAt time.Time) []*events.Event {
	var log []*events.Event
	old := time.Date(2021, 3, 1, 9, 0, 0, 0, time.UTC)
	ev := func(typ string, actor int64, imported bool, set func(e *events.Event)) {
		e := events.New(typ, 1, actor)
		if imported {
			e.At, e.ImportedAt = old.Add(time.Duration(len(log))*time.Minute), &importedAt
		}
		set(e)
		log = append(log, e)
	}
	send := func(actor int64, text string, imported bool) {
		ev(events.MessageSent, actor, imported, func(e *events.Event) { e.MsgID, e.Body = uuid.NewString(), &text })
	}
	ev(events.ConversationCreated, 10, true, func(e *events.Event) { e.Members = []int64{11, 12} }) // seq 1
	send(10, "old 1", true)                                                                         // seq 2
	send(11, "old 2", true)                                                                         // seq 3
	ev(events.MemberAdded, 10, true, func(e *events.Event) { e.UserID = 13 })                       // seq 4
	send(13, "old 3", true)                                                                         // seq 5
	send(12, "old 4", true)                                                                         // seq 6
	send(11, "live", false)                                                                         // seq 7
	return log
}

// TestImportedHistory: imported messages take their seqs and original
// times but no inbox entry (an imported join: its joiner's), every
// member's read position is past them, the entries of imported events
// carry imported_at; the same whether the log is applied one record at a
// time or in one batch; I1-I8 hold.
func TestImportedHistory(t *testing.T) {
	ctx := context.Background()
	importedAt := time.Now().UTC().Truncate(time.Microsecond)
	log := importedLog(importedAt)
	var dumps []map[string][]string
	for _, n := range []int{1, 3, len(log)} {
		pool, _ := pgtest.NewPool(t)
		applyLog(t, ctx, pool, log, n)
		rep, err := projector.Verify(ctx, pool)
		require.NoError(t, err)
		require.True(t, rep.OK(), "batches of %d: %v", n, rep)
		d := dump(t, ctx, pool)
		rows, err := pool.Query(ctx, `SELECT seq || ' ' || imported || ' ' || to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI')
FROM messages ORDER BY seq`)
		require.NoError(t, err)
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			d["messages"] = append(d["messages"], s)
		}
		require.NoError(t, rows.Err())
		var stale int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox i JOIN messages m ON m.conversation_id = i.conversation_id
  AND m.seq = i.seq WHERE m.imported AND i.kind = 1 AND i.created_at <> $1`, importedAt).Scan(&stale))
		require.Zero(t, stale, "the entries of imported events carry imported_at")
		dumps = append(dumps, d)
	}
	require.Equal(t, dumps[0], dumps[1], "batches of 1 and of 3 project the same")
	require.Equal(t, dumps[0], dumps[2], "batches of 1 and one batch project the same")
	d := dumps[0]
	require.Len(t, d["messages"], 7)
	require.Equal(t, []string{"1 true 2021-03-01 09:00", "2 true 2021-03-01 09:01", "3 true 2021-03-01 09:02",
		"4 true 2021-03-01 09:03", "5 true 2021-03-01 09:04", "6 true 2021-03-01 09:05"}, d["messages"][:6],
		"imported history in order, with its original times")
	require.True(t, strings.HasPrefix(d["messages"][6], "7 false "), d["messages"][6])
	entries := func(user int64) string {
		var of []string
		for _, s := range d["inbox"] {
			if strings.HasPrefix(s, fmt.Sprint(user)+":") {
				of = append(of, s[strings.Index(s, " ")+1:])
			}
		}
		return strings.Join(of, ", ")
	}
	for _, u := range []int64{10, 11, 12} {
		require.Equal(t, "1/1 kind 1, 1/7 kind 1", entries(u), "user %d: the creation and the live message", u)
	}
	require.Equal(t, "1/4 kind 1, 1/7 kind 1", entries(13), "its own join and the live message")
	require.Equal(t, []string{"10 in 1 read 6 armed false", "11 in 1 read 7 armed false", "12 in 1 read 6 armed false",
		"13 in 1 read 6 armed false"}, d["records"], "imported history is read; the live message only by its sender")
}
