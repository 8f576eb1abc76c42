package projector_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/projector"
)

var largeMembers = flag.Int("largemembers", 3000,
	"members of TestReadFanoutBound's conversation (100000 for the figures of docs/large-conversations.md)")

// TestReadFanoutBound builds a conversation of -largemembers members by
// bulk joins (batches of 500, as a fanout applies them), then sends 200
// messages into it, 20 of them mentioning a member, while 30 members read
// to its end between messages: the inbox rows the messages write are
// exactly the bound of docs/large-conversations.md (one per armed member,
// one per mention), whatever the member count. Timings are logged, never
// asserted.
func TestReadFanoutBound(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewPool(t)
	p, err := projector.New(projector.Config{Topic: "t", LargeThreshold: 1000}, pool)
	require.NoError(t, err)
	var offset int64
	apply := func(evs ...*events.Event) {
		t.Helper()
		recs := make([]projector.Record, len(evs))
		for i, e := range evs {
			recs[i] = projector.Record{Partition: 0, Offset: offset, Event: e}
			offset++
		}
		_, err := p.Apply(ctx, recs)
		require.NoError(t, err)
	}
	const conv, owner = 1, 1
	created := events.New(events.ConversationCreated, conv, owner)
	apply(created)
	start := time.Now()
	for first := 2; first <= *largeMembers; first += 500 {
		var evs []*events.Event
		for u := first; u < first+500 && u <= *largeMembers; u++ {
			e := events.New(events.MemberAdded, conv, owner)
			e.UserID = int64(u)
			evs = append(evs, e)
		}
		apply(evs...)
	}
	joined := time.Since(start)
	var mode bool
	var count int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT read_fanout, member_count FROM conversations WHERE id = $1`, conv).Scan(&mode, &count))
	require.True(t, mode)
	require.EqualValues(t, *largeMembers, count)

	rowsBefore := inboxRows(t, pool)
	start = time.Now()
	const messages, readers = 200, 30
	wantRows := 0
	for i := range messages {
		text := "broadcast"
		send := events.New(events.MessageSent, conv, owner)
		send.MsgID, send.Body = uuid.NewString(), &text
		if i%10 == 0 {
			send.Mentions = []int64{int64(2 + i)} // a member
			wantRows++
		}
		apply(send)
		if i%20 == 0 && i+1 < messages {
			// Readers catch up after this message: each is armed, and the
			// next message reaches each once.
			var evs []*events.Event
			for r := range readers {
				read := events.New(events.ReadUpdated, conv, int64(1000+r))
				read.ReadSeq = events.Ptr(int64(1 << 40))
				evs = append(evs, read)
			}
			apply(evs...)
			wantRows += 2 * readers // the read's record entry, and the next message
		}
	}
	sent := time.Since(start)
	rows := inboxRows(t, pool) - rowsBefore
	// A mention of a reader who is armed at that message is one entry, not
	// two: i%10 == 0 mentions user 2+i, never a reader (1000..1029) here.
	require.EqualValues(t, wantRows, rows, "inbox rows of %d messages to %d members", messages, *largeMembers)
	start = time.Now()
	rep, err := projector.Verify(ctx, pool)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep)
	t.Logf("verify: %v", time.Since(start).Round(time.Millisecond))
	t.Logf("%d members joined in %v (%.0f joins/s); %d messages in %v (%.2f ms each, one per batch), %d inbox rows (%.2f per message, reads' record entries included)",
		*largeMembers, joined.Round(time.Millisecond), float64(*largeMembers)/joined.Seconds(), messages, sent.Round(time.Millisecond),
		float64(sent.Milliseconds())/messages, rows, float64(rows)/messages)
}

func inboxRows(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox`).Scan(&n))
	return n
}
