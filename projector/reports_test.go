package projector_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projector"
)

// reported is user's report of message seq of conv under report id.
func reported(conv, user, seq int64, id, reason string) *events.Event {
	e := events.New(events.MessageReported, conv, user)
	e.ReportID, e.Seq, e.Reason = id, seq, reason
	return e
}

// TestReportsProjected: a report is one row per report id, whatever the
// log repeats (the same record again, another event with the same id, a
// batch applied twice), and no inbox entry; the projection refuses what
// the reporter could not see, its own message and a system message; a
// report can be reported within the batch its message and the
// reporter's join come in; the first resolution stands.
func TestReportsProjected(t *testing.T) {
	ctx := context.Background()
	pool, p := newProjector(t, projector.Config{})
	msg := sent(1, 2, "spam")
	id, other := uuid.NewString(), uuid.NewString()
	rep := reported(1, 1, 2, id, "spam")
	added := events.New(events.MemberAdded, 1, 1)
	added.UserID = 3
	late := sent(1, 2, "after 3 joined")
	removed := events.New(events.MemberRemoved, 1, 1)
	removed.UserID = 3
	recs := []*events.Event{
		created(1, 1, 2),
		msg,                           // seq 2
		rep,                           // kept
		rep,                           // the same record again: no-op
		reported(1, 1, 2, id, "hate"), // another event, the same report id: no-op
		reported(1, 2, 2, uuid.NewString(), "spam"),  // its own message: refused
		reported(1, 1, 1, uuid.NewString(), "spam"),  // a system message: refused
		reported(1, 9, 2, uuid.NewString(), "spam"),  // never a member: refused
		reported(1, 1, 99, uuid.NewString(), "spam"), // no such seq: refused
		added, // seq 3: 3 joins
		reported(1, 3, 2, uuid.NewString(), "spam"), // before 3's join: refused
		late,                                 // seq 4
		removed,                              // seq 5: 3 leaves
		reported(1, 3, 4, other, "violence"), // a former member, of what it saw: kept
	}
	var batch []projector.Record
	for i, e := range recs {
		batch = append(batch, projector.Record{Partition: 0, Offset: int64(i), Event: e})
	}
	res, err := p.Apply(ctx, batch)
	require.NoError(t, err)
	require.Equal(t, 5, res.Rejected)
	var headBefore int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT sum(inbox_seq) FROM users`).Scan(&headBefore))

	resolve := func(res string, off int64) {
		e := events.New(events.ReportResolved, 1, 0)
		e.Service, e.ReportID, e.Resolution = "1:mod", id, res
		_, err := p.Apply(ctx, []projector.Record{{Partition: 0, Offset: off, Event: e}})
		require.NoError(t, err)
	}
	resolve(events.ResolutionActioned, int64(len(recs)))
	resolve(events.ResolutionDismissed, int64(len(recs)+1))
	// The whole log again (a fanout that lost its offsets would be
	// fenced; a replay starts from empty tables): nothing is applied twice.
	_, err = p.Apply(ctx, batch)
	require.NoError(t, err)

	type row struct {
		id, reason, state string
		seq, reporter     int64
		sender            int64
		resolution        *string
	}
	rows, err := pool.Query(ctx, `SELECT id::text, reason, state, seq, reporter_id, sender_id, resolution FROM reports ORDER BY seq`)
	require.NoError(t, err)
	var got []row
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.id, &r.reason, &r.state, &r.seq, &r.reporter, &r.sender, &r.resolution))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	actioned := events.ResolutionActioned
	require.Equal(t, []row{
		{id: id, reason: "spam", state: "resolved", seq: 2, reporter: 1, sender: 2, resolution: &actioned},
		{id: other, reason: "violence", state: "open", seq: 4, reporter: 3, sender: 2},
	}, got)
	var headAfter int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT sum(inbox_seq) FROM users`).Scan(&headAfter))
	require.Equal(t, headBefore, headAfter, "reports and resolutions give nobody an entry")
	requireVerified(t, pool)
}
