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

// TestReadFanoutBound builds a conversation of 3,000 members by bulk
// joins (batches of 500, as a fanout applies them), then sends 200
// messages into it, 20 of them mentioning a member, while 30 members read
// to its end between messages: the inbox rows the messages write are
// exactly the bound of docs/large-conversations.md (one per armed member,
// one per mention), whatever the member count. BenchmarkReadFanout times
// the same at 100,000 members.
func TestReadFanoutBound(t *testing.T) {
	r := readFanoutBound(t, 3000, true)
	t.Logf("%d members joined in %v; %d messages in %v, %d inbox rows; verify %v",
		r.members, r.joined.Round(time.Millisecond), r.messages, r.sent.Round(time.Millisecond), r.rows, r.verify.Round(time.Millisecond))
}

// BenchmarkReadFanout is the figure of docs/large-conversations.md:
// TestReadFanoutBound's run at 100,000 members, each iteration a
// conversation of its own (docs/benchmarks.md has the command). It checks
// the bound but not projector.Verify, whose member-by-message checks take
// longer than the figure at this size; the test verifies at 3,000.
func BenchmarkReadFanout(b *testing.B) {
	var joined, sent time.Duration
	var r readFanoutRun
	for range b.N {
		r = readFanoutBound(b, 100_000, false)
		joined, sent = joined+r.joined, sent+r.sent
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(r.members)*n/joined.Seconds(), "joins/s")
	b.ReportMetric(float64(sent.Microseconds())/1000/(n*float64(r.messages)), "ms/message")
	b.ReportMetric(float64(r.rows)/float64(r.messages), "inbox-rows/message")
}

// readFanoutRun is what one readFanoutBound measured.
type readFanoutRun struct {
	members, messages    int
	rows                 int64 // inbox rows the messages wrote, reads' record entries included
	joined, sent, verify time.Duration
}

// readFanoutBound builds the conversation of members, sends its messages
// (each its own batch) and checks the rows they wrote against the bound,
// and with verify the projection with projector.Verify.
func readFanoutBound(t testing.TB, members int, verify bool) readFanoutRun {
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
	apply(events.New(events.ConversationCreated, conv, owner))
	r := readFanoutRun{members: members, messages: 200}
	start := time.Now()
	for first := 2; first <= members; first += 500 {
		var evs []*events.Event
		for u := first; u < first+500 && u <= members; u++ {
			e := events.New(events.MemberAdded, conv, owner)
			e.UserID = int64(u)
			evs = append(evs, e)
		}
		apply(evs...)
	}
	r.joined = time.Since(start)
	var mode bool
	var count int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT read_fanout, member_count FROM conversations WHERE id = $1`, conv).Scan(&mode, &count))
	require.True(t, mode)
	require.EqualValues(t, members, count)

	rowsBefore := inboxRows(t, pool)
	start = time.Now()
	const readers = 30
	wantRows := 0
	for i := range r.messages {
		text := "broadcast"
		send := events.New(events.MessageSent, conv, owner)
		send.MsgID, send.Body = uuid.NewString(), &text
		if i%10 == 0 {
			send.Mentions = []int64{int64(2 + i)} // a member
			wantRows++
		}
		apply(send)
		if i%20 == 0 && i+1 < r.messages {
			// Readers catch up after this message: each is armed, and the
			// next message reaches each once.
			var evs []*events.Event
			for k := range readers {
				read := events.New(events.ReadUpdated, conv, int64(1000+k))
				read.ReadSeq = events.Ptr(int64(1 << 40))
				evs = append(evs, read)
			}
			apply(evs...)
			wantRows += 2 * readers // the read's record entry, and the next message
		}
	}
	r.sent = time.Since(start)
	r.rows = inboxRows(t, pool) - rowsBefore
	// A mention of a reader who is armed at that message is one entry, not
	// two: i%10 == 0 mentions user 2+i, never a reader (1000..1029) here.
	require.EqualValues(t, wantRows, r.rows, "inbox rows of %d messages to %d members", r.messages, members)
	if verify {
		start = time.Now()
		rep, err := projector.Verify(ctx, pool)
		require.NoError(t, err)
		require.True(t, rep.OK(), "%v", rep)
		r.verify = time.Since(start)
	}
	return r
}

func inboxRows(t testing.TB, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox`).Scan(&n))
	return n
}
