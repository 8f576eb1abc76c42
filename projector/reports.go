package projector

import (
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

// The rules of reports (docs/protocol.md, "Reports"): a message.reported
// is judged at its log position like a change of the message (the
// reporter must have seen it: one of its membership spans covers the
// seq), then kept in the reports table under its report id; a
// report.resolved closes a report once. Neither touches the message, a
// record or an inbox: the members never learn of a report, and no user
// row is locked for one. A repeated report id is a no-op, answered from
// the table, so a record seen twice, a retried report and a replay each
// keep one row per report.

// reportState is a report the batch names: loaded, or made by the batch.
type reportState struct {
	id, eventID, msgID     string
	conv, seq              int64
	sender, reporter       int64
	reason, note           string
	at                     time.Time
	fresh                  bool // made in this batch: inserted
	resolved               bool
	resolvedNow            bool // resolved in this batch: updated
	resolution, resolvNote string
	resolvedBy             string
	resolvedAt             time.Time
}

// reportSpan is a membership span of a reporter as loaded (left 0: open
// when loaded).
type reportSpan struct{ joined, left int64 }

const (
	sqlReports = `SELECT id::text, conversation_id, seq, state = 'resolved' FROM reports WHERE id = ANY($1::uuid[])`
	// sqlReporterSpans are every span, past and present, of the
	// reporters in their conversations.
	sqlReporterSpans = `SELECT s.conversation_id, s.user_id, s.joined_seq, coalesce(s.left_seq, 0)
FROM member_spans s JOIN unnest($1::bigint[], $2::bigint[]) AS k(c, u) ON s.conversation_id = k.c AND s.user_id = k.u`
	sqlReportedMessages = `SELECT m.conversation_id, m.seq, m.msg_id::text, m.sender_id, m.kind
FROM messages m JOIN unnest($1::bigint[], $2::bigint[]) AS k(c, s) ON m.conversation_id = k.c AND m.seq = k.s`
	sqlInsertReports = `INSERT INTO reports (id, event_id, conversation_id, seq, msg_id, sender_id, reporter_id, reason, note, created_at)
SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::bigint[], $5::uuid[], $6::bigint[], $7::bigint[], $8::text[],
  $9::text[], $10::timestamptz[])
ON CONFLICT (id) DO NOTHING`
	sqlResolveReports = `UPDATE reports r SET state = 'resolved', resolution = u.res, resolution_note = u.note,
  resolved_by = u.by, resolved_at = u.at
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::timestamptz[]) AS u(id, res, note, by, at)
WHERE r.id = u.id AND r.state = 'open'`
)

// needReport adds the keys of a report event to k.
func (k *loadKeys) needReport(e *events.Event) {
	k.reportIDs = append(k.reportIDs, e.ReportID)
	if e.Type == events.MessageReported {
		k.reportConvs, k.reportSeqs = append(k.reportConvs, e.ConversationID), append(k.reportSeqs, e.Seq)
		k.reporters = append(k.reporters, e.ActorID)
	}
}

// queueLoadReports queues the reads the batch's reports depend on: the
// reports it names, the reported messages (unless the changes' reads
// load them) and the reporters' spans.
func queueLoadReports(bt *pgx.Batch, b *batch, k loadKeys) {
	if len(k.reportIDs) == 0 {
		return
	}
	bt.Queue(sqlReports, k.reportIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			rp := &reportState{}
			if err := rows.Scan(&rp.id, &rp.conv, &rp.seq, &rp.resolved); err != nil {
				return err
			}
			b.reports[rp.id] = rp
		}
		return rows.Err()
	})
	if len(k.reportConvs) == 0 {
		return
	}
	bt.Queue(sqlReportedMessages, k.reportConvs, k.reportSeqs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			st := &msgState{found: true, mine: map[int64]string{}, mineChanged: map[int64]bool{}}
			if err := rows.Scan(&st.key.conv, &st.key.seq, &st.msgID, &st.sender, &st.kind); err != nil {
				return err
			}
			if _, ok := b.msgStates[st.key]; !ok { // the changes' fuller read comes first
				b.msgStates[st.key] = st
			}
		}
		return rows.Err()
	})
	bt.Queue(sqlReporterSpans, k.reportConvs, k.reporters).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c, u int64
			var s reportSpan
			if err := rows.Scan(&c, &u, &s.joined, &s.left); err != nil {
				return err
			}
			key := recKey{u, c}
			b.reportSpans[key] = append(b.reportSpans[key], s)
		}
		return rows.Err()
	})
}

// sees says whether user was ever a member of c and whether one of its
// spans covers seq, at this position of the log: the spans loaded (an
// open one may have closed in this batch), those the batch opened, and
// the current one.
func (b *batch) sees(c *convState, user, seq int64) (ever, sees bool) {
	covers := func(joined, left int64) bool { return joined <= seq && (left == 0 || seq <= left) }
	if joined, ok := c.joined[user]; ok {
		ever, sees = true, covers(joined, 0)
	}
	for _, s := range b.reportSpans[recKey{user, c.id}] {
		ever = true
		left := s.left
		if left == 0 {
			for _, cl := range b.closes {
				if cl.conv == c.id && cl.user == user {
					left = cl.left
				}
			}
		}
		sees = sees || covers(s.joined, left)
	}
	for _, s := range b.newSpans {
		if s.conv == c.id && s.user == user {
			ever = true
			sees = sees || covers(s.joined, s.left)
		}
	}
	return ever, sees
}

// messageReported keeps a member's report of a message it can see: a
// text message that is not its own (deleted ones too: the report stays
// with the message's sender, without its body).
func (b *batch) messageReported(r Record, c *convState) {
	e := r.Event
	if b.reports[e.ReportID] != nil {
		b.dups = append(b.dups, e.EventID) // its report id is taken: answered from the table
		return
	}
	if !c.exists {
		b.reject(r, projection.ReasonNoConversation)
		return
	}
	ever, sees := b.sees(c, e.ActorID, e.Seq)
	if !ever {
		b.reject(r, projection.ReasonNotMember)
		return
	}
	m := b.msgFor(c.id, e.Seq)
	switch {
	case !m.found || !sees:
		b.reject(r, projection.ReasonNoMessage)
		return
	case m.kind != "text":
		b.reject(r, projection.ReasonSystemMessage)
		return
	case m.sender == e.ActorID:
		b.reject(r, projection.ReasonOwnMessage)
		return
	}
	rp := &reportState{id: e.ReportID, eventID: e.EventID, msgID: m.msgID, conv: c.id, seq: e.Seq, sender: m.sender,
		reporter: e.ActorID, reason: e.Reason, note: e.Note, at: e.At, fresh: true}
	b.reports[rp.id] = rp
	b.newReports = append(b.newReports, rp)
	b.changeAcks = append(b.changeAcks, ack{eventID: e.EventID, seq: e.Seq})
}

// reportResolved closes a report of the conversation; the first
// resolution stands, a later one changes nothing.
func (b *batch) reportResolved(r Record, c *convState) {
	e := r.Event
	rp := b.reports[e.ReportID]
	switch {
	case rp == nil || rp.conv != c.id:
		b.reject(r, projection.ReasonNoReport)
		return
	case !rp.resolved:
		rp.resolved, rp.resolvedNow = true, true
		rp.resolution, rp.resolvNote, rp.resolvedBy, rp.resolvedAt = e.Resolution, e.Note, e.Service, e.At
		b.resolvedReports = append(b.resolvedReports, rp)
	}
	b.changeAcks = append(b.changeAcks, ack{eventID: e.EventID, seq: rp.seq})
}

// queueReports queues the writes of the batch's reports: the new ones,
// then the resolutions (of new ones too).
func (b *batch) queueReports(bt *pgx.Batch) {
	if n := len(b.newReports); n > 0 {
		ids, evs, msgs, reasons, notes := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		cs, ss, snds, reps := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		ats := make([]time.Time, n)
		for i, rp := range b.newReports {
			ids[i], evs[i], msgs[i], reasons[i], notes[i] = rp.id, rp.eventID, rp.msgID, rp.reason, rp.note
			cs[i], ss[i], snds[i], reps[i], ats[i] = rp.conv, rp.seq, rp.sender, rp.reporter, rp.at
		}
		bt.Queue(sqlInsertReports, ids, evs, cs, ss, msgs, snds, reps, reasons, notes, ats)
	}
	if n := len(b.resolvedReports); n > 0 {
		ids, res, notes, by := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		ats := make([]time.Time, n)
		for i, rp := range b.resolvedReports {
			ids[i], res[i], notes[i], by[i], ats[i] = rp.id, rp.resolution, rp.resolvNote, rp.resolvedBy, rp.resolvedAt
		}
		bt.Queue(sqlResolveReports, ids, res, notes, by, ats)
	}
}
