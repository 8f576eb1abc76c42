package write

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
	"github.com/inboxd/inboxd/gateway/internal/servers"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// Reporter is the path of reports (docs/protocol.md, "Reports"): a
// member's report of a message, and a service's resolution of a report.
// Each checks what the projection would refuse, appends its event and
// waits up to the ack wait for its projection, as a change does. It is
// safe for concurrent use.
type Reporter struct {
	srv      *servers.Servers
	hub      *hub.Hub
	app      *Appender
	ackWait  time.Duration
	draining <-chan struct{}
}

// ReporterConfig is what a Reporter needs; every field is required.
type ReporterConfig struct {
	Servers  *servers.Servers // a report's statements go to its conversation's server
	Hub      *hub.Hub
	App      *Appender
	AckWait  time.Duration // how long a report waits for its projection
	Draining <-chan struct{}
}

// NewReporter makes the report path of cfg.
func NewReporter(cfg ReporterConfig) *Reporter {
	return &Reporter{srv: cfg.Servers, hub: cfg.Hub, app: cfg.App, ackWait: cfg.AckWait, draining: cfg.Draining}
}

// ReportRequest is a member's report of message Seq of ConversationID.
type ReportRequest struct {
	ReportID            string
	ConversationID, Seq int64
	Reason, Note        string
}

// sqlReportCheck reads what a report must know before it appends: whether
// the conversation exists, whether the user was ever a member and whether
// one of its spans covers the seq, the message's kind and sender, the
// report already made with this id, and the reason a report with this id
// by this user was refused, if it was. $1 conversation, $2 seq, $3 user,
// $4 report id.
const sqlReportCheck = `SELECT EXISTS (SELECT 1 FROM conversations WHERE id = $1),
	EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $1 AND user_id = $3),
	EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $1 AND user_id = $3
		AND joined_seq <= $2 AND (left_seq IS NULL OR left_seq >= $2)),
	m.kind, m.sender_id,
	r.conversation_id, r.seq, r.reporter_id, r.reason, r.note, r.created_at,
	(SELECT reason FROM rejections WHERE msg_id = $4 AND actor_id = $3 LIMIT 1)
FROM (SELECT 1) one LEFT JOIN messages m ON m.conversation_id = $1 AND m.seq = $2
LEFT JOIN reports r ON r.id = $4`

// sqlReportOutcome reads the report $1 and the reason its event $2 was
// refused, if it was.
const sqlReportOutcome = `SELECT r.conversation_id, r.seq, r.reporter_id, r.reason, r.note, r.created_at,
	(SELECT reason FROM rejections WHERE event_id = $2)
FROM (SELECT 1) one LEFT JOIN reports r ON r.id = $1`

// storedReport is a reports row as the checks read it (nil fields: none).
type storedReport struct {
	conv, seq, reporter *int64
	reason, note        *string
	at                  *time.Time
}

func (s *storedReport) targets() []any {
	return []any{&s.conv, &s.seq, &s.reporter, &s.reason, &s.note, &s.at}
}

// answer is the report as its reporter sees it, or the error of a report
// id taken by another report; nil, nil when there is no such report.
func (s *storedReport) answer(id string, user int64, req ReportRequest) (*protocol.Report, error) {
	switch {
	case s.conv == nil:
		return nil, nil
	case *s.reporter != user || *s.conv != req.ConversationID || *s.seq != req.Seq:
		return nil, apierr.BadRequest("report_id %s is already used by another report", id)
	}
	return &protocol.Report{ReportID: id, ConversationID: *s.conv, Seq: *s.seq, Reason: *s.reason, Note: *s.note,
		CreatedAt: s.at.UTC()}, nil
}

// Report validates req, checks it against the projections, appends its
// event and waits up to the ack wait for its projection: the report, or
// pending (true) when the wait ended first. A report id already used for
// the same report answers that report.
func (rp *Reporter) Report(ctx context.Context, user int64, req ReportRequest) (*protocol.Report, bool, error) {
	e, err := reportEvent(user, req)
	if err != nil {
		return nil, false, err
	}
	ack := rp.hub.SubscribeEvent(e.EventID)
	defer ack.Close()
	rej := rp.hub.SubscribeRejection(e.ReportID)
	defer rej.Close()
	db := rp.srv.Conv(e.ConversationID)
	var exists, ever, sees bool
	var kind *string
	var sender *int64
	var st storedReport
	var refused *string
	if err := db.QueryRow(ctx, sqlReportCheck, e.ConversationID, e.Seq, user, e.ReportID).Scan(
		append(append([]any{&exists, &ever, &sees, &kind, &sender}, st.targets()...), &refused)...); err != nil {
		return nil, false, fmt.Errorf("check the report %s: %w", e.ReportID, err)
	}
	if a, err := st.answer(e.ReportID, user, req); a != nil || err != nil {
		return a, false, err
	}
	switch {
	case !exists:
		return nil, false, apierr.NotFound("conversation %d does not exist", e.ConversationID)
	case refused != nil:
		return nil, false, refusal(*refused, e)
	case !ever:
		return nil, false, apierr.NotMember("user %d was never a member of conversation %d", user, e.ConversationID)
	case kind == nil || !sees:
		return nil, false, apierr.NotFound("conversation %d has no message %d you can see", e.ConversationID, e.Seq)
	case *kind != protocol.MessageText:
		return nil, false, refusal(projection.ReasonSystemMessage, e)
	case *sender == user:
		return nil, false, refusal(projection.ReasonOwnMessage, e)
	}
	if err := rp.app.Append(ctx, e); err != nil {
		return nil, false, err
	}
	var a *protocol.Report
	pending := false
	err = awaitProjection(ctx, rp.ackWait, rp.draining, ack, rej, func(last bool) (bool, error) {
		var st storedReport
		var reason *string
		if err := db.QueryRow(ctx, sqlReportOutcome, e.ReportID, e.EventID).Scan(append(st.targets(), &reason)...); err != nil {
			return true, fmt.Errorf("outcome of the report %s: %w", e.ReportID, err)
		}
		if reason != nil {
			return true, refusal(*reason, e)
		}
		var err error
		if a, err = st.answer(e.ReportID, user, req); a != nil || err != nil {
			return true, err
		}
		pending = last
		return last, nil
	})
	if err != nil {
		return nil, false, err
	}
	return a, pending, nil
}

// reportEvent validates req and makes its event.
func reportEvent(user int64, req ReportRequest) (*events.Event, error) {
	if req.ConversationID <= 0 || req.Seq <= 0 {
		return nil, apierr.BadRequest("conversation and seq must be positive integers")
	}
	if req.ReportID == "" {
		return nil, apierr.BadRequest("report_id (or the Idempotency-Key header) is required")
	}
	id, err := input.ParseMsgID(req.ReportID)
	if err != nil {
		return nil, apierr.BadRequest("report_id must be a uuid")
	}
	if !events.ValidReportReason(req.Reason) {
		return nil, apierr.BadRequest("reason must be one of %v", events.ReportReasons)
	}
	if len(req.Note) > events.MaxReportNote {
		return nil, apierr.TooLarge("note is %d bytes, over the limit of %d", len(req.Note), events.MaxReportNote)
	}
	if err := input.CheckText("note", req.Note); err != nil {
		return nil, err
	}
	e := events.New(events.MessageReported, req.ConversationID, user)
	e.ReportID, e.Seq, e.Reason, e.Note = id, req.Seq, req.Reason, req.Note
	return e, nil
}

// ResolveRequest is a service's resolution of report ReportID: EventID is
// the event's id (derived from the call's Idempotency-Key), Service the
// API key's actor name.
type ResolveRequest struct {
	ReportID, EventID, Service string
	Resolution, Note           string
}

// ErrNoReport is a resolution of a report that does not exist (yet: a
// report not projected is not in the queue either).
var ErrNoReport = errors.New("no such report")

const sqlReportState = `SELECT conversation_id, state = 'resolved' FROM reports WHERE id = $1`

// locate finds report id on the servers: its conversation and whether it
// is resolved; 0 when no server has it.
func (rp *Reporter) locate(ctx context.Context, id string) (int64, bool, error) {
	for _, db := range rp.srv.Pools {
		var conv int64
		var resolved bool
		err := db.QueryRow(ctx, sqlReportState, id).Scan(&conv, &resolved)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue
		case err != nil:
			return 0, false, fmt.Errorf("state of the report %s: %w", id, err)
		}
		return conv, resolved, nil
	}
	return 0, false, nil
}

// Resolve resolves a report, unless it is resolved already (the first
// resolution stands): it returns the report's conversation, and pending
// when the wait for the projection ended first. A report that does not
// exist is ErrNoReport.
func (rp *Reporter) Resolve(ctx context.Context, req ResolveRequest) (conv int64, pending bool, err error) {
	id, err := input.ParseMsgID(req.ReportID)
	if err != nil {
		return 0, false, ErrNoReport
	}
	if !events.ValidResolution(req.Resolution) {
		return 0, false, apierr.BadRequest("resolution must be %q or %q", events.ResolutionDismissed, events.ResolutionActioned)
	}
	if err := events.ValidReportNote(req.Note); err != nil {
		return 0, false, apierr.BadRequest("note must be text of at most %d bytes", events.MaxReportNote)
	}
	conv, resolved, err := rp.locate(ctx, id)
	switch {
	case err != nil:
		return 0, false, err
	case conv == 0:
		return 0, false, ErrNoReport
	case resolved:
		return conv, false, nil
	}
	e := events.New(events.ReportResolved, conv, 0)
	e.EventID, e.Service, e.ReportID, e.Resolution, e.Note = req.EventID, req.Service, id, req.Resolution, req.Note
	ack := rp.hub.SubscribeEvent(e.EventID)
	defer ack.Close()
	rej := rp.hub.SubscribeRejection(e.ReportID)
	defer rej.Close()
	if err := rp.app.Append(ctx, e); err != nil {
		return 0, false, err
	}
	db := rp.srv.Conv(conv)
	err = awaitProjection(ctx, rp.ackWait, rp.draining, ack, rej, func(last bool) (bool, error) {
		var resolved bool
		if err := db.QueryRow(ctx, sqlReportState, id).Scan(&conv, &resolved); err != nil {
			return true, fmt.Errorf("outcome of the resolution of %s: %w", id, err)
		}
		pending = last && !resolved
		return resolved || last, nil
	})
	return conv, pending, err
}
