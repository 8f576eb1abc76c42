package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
	"github.com/inboxd/inboxd/gateway/write"
	"github.com/inboxd/inboxd/protocol"
)

// Reports (docs/protocol.md, "Reports"): a member reports a message; the
// server API lists the moderators' queue and resolves reports. The
// writes go through write.Reporter.

// handleReport is POST /v1/conversations/{cid}/messages/{seq}/report: 201
// with the report once projected, 202 pending.
func (g *Gateway) handleReport(w http.ResponseWriter, r *http.Request) error {
	cid, err := pathID(r, "cid")
	if err != nil {
		return err
	}
	seq, err := pathID(r, "seq")
	if err != nil {
		return err
	}
	var body protocol.ReportMessage
	if err := g.decodeBody(w, r, &body); err != nil {
		return err
	}
	req := write.ReportRequest{ConversationID: cid, Seq: seq, Reason: body.Reason, Note: body.Note}
	if req.ReportID, err = keyID(r, "report_id", body.ReportID); err != nil {
		return err
	}
	a, pending, err := g.reports.Report(r.Context(), userFrom(r.Context()), req)
	if err != nil {
		return err
	}
	if pending {
		apierr.WriteJSON(w, http.StatusAccepted, protocol.ReportPending{ReportID: req.ReportID, Status: protocol.StatusPending})
		return nil
	}
	apierr.WriteJSON(w, http.StatusCreated, a)
	return nil
}

// The queue's page sizes.
const (
	defaultReportsLimit = 50
	maxReportsLimit     = 200
)

// sqlServerReports reads reports with their messages as they are now;
// the conditions follow.
const sqlServerReports = `SELECT r.id::text, r.conversation_id, r.seq, r.msg_id::text, r.sender_id, r.reporter_id, r.reason, r.note,
	r.created_at, r.state, r.resolution, r.resolution_note, r.resolved_by, r.resolved_at,
	CASE WHEN m.deleted THEN NULL ELSE m.body END, coalesce(m.deleted, true)
FROM reports r LEFT JOIN messages m ON m.conversation_id = r.conversation_id AND m.seq = r.seq
WHERE `

// The queue's pages, oldest first, by state ($1), after the cursor ($2,
// $3), at most $4, of one conversation ($5) or all.
const (
	sqlReportsPage = sqlServerReports + `r.state = $1 AND (r.created_at, r.id) > ($2::timestamptz, $3::uuid)
ORDER BY r.created_at, r.id LIMIT $4`
	sqlReportsPageOf = sqlServerReports + `r.conversation_id = $5 AND r.state = $1 AND (r.created_at, r.id) > ($2::timestamptz, $3::uuid)
ORDER BY r.created_at, r.id LIMIT $4`
	sqlReportByID = sqlServerReports + `r.id = $1`
)

// scanServerReport reads one row of sqlServerReports.
func scanServerReport(row pgx.Row) (protocol.ServerReport, error) {
	var a protocol.ServerReport
	var resolution, note, by *string
	err := row.Scan(&a.ReportID, &a.ConversationID, &a.Seq, &a.MsgID, &a.SenderID, &a.ReporterID, &a.Reason, &a.Note,
		&a.CreatedAt, &a.State, &resolution, &note, &by, &a.ResolvedAt, &a.Body, &a.Deleted)
	if err != nil {
		return a, err
	}
	a.CreatedAt = a.CreatedAt.UTC()
	if a.ResolvedAt != nil {
		t := a.ResolvedAt.UTC()
		a.ResolvedAt = &t
	}
	for _, f := range []struct {
		dst *string
		src *string
	}{{&a.Resolution, resolution}, {&a.ResolutionNote, note}, {&a.ResolvedBy, by}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	return a, nil
}

// reportCursor is a position in the queue: after the report (at, id).
type reportCursor struct {
	at time.Time
	id string
}

// String is the cursor as after= takes it: "<created_at in µs since the
// epoch>_<report id>" (opaque to clients).
func (c reportCursor) String() string {
	return strconv.FormatInt(c.at.UnixMicro(), 10) + "_" + c.id
}

// parseReportCursor reads after=; "" is the start of the queue.
func parseReportCursor(s string) (reportCursor, error) {
	if s == "" {
		return reportCursor{at: time.Unix(0, 0).AddDate(-100, 0, 0), id: uuid.Nil.String()}, nil
	}
	us, id, ok := strings.Cut(s, "_")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || uuid.Validate(id) != nil || len(id) != 36 {
		return reportCursor{}, apierr.BadRequest("after must be the next of a previous page")
	}
	return reportCursor{at: time.UnixMicro(n), id: strings.ToLower(id)}, nil
}

// handleServerReports is GET /v1/server/reports (scope reports): the
// moderators' queue, oldest first, by state (open by default), of one
// conversation or all, in pages of keyset cursors.
func (g *Gateway) handleServerReports(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	state := q.Get("state")
	switch state {
	case "":
		state = protocol.ReportOpen
	case protocol.ReportOpen, protocol.ReportResolved:
	default:
		return apierr.BadRequest("state must be %s or %s", protocol.ReportOpen, protocol.ReportResolved)
	}
	cid, err := queryInt(q, "conversation_id", 0, 1, 1<<62)
	if err != nil {
		return err
	}
	limit, err := queryInt(q, "limit", defaultReportsLimit, 1, maxReportsLimit)
	if err != nil {
		return err
	}
	after, err := parseReportCursor(q.Get("after"))
	if err != nil {
		return err
	}
	pools := g.srv.Pools
	sqlText, args := sqlReportsPage, []any{state, after.at, after.id, limit + 1}
	if cid != 0 {
		pools = []*pgxpool.Pool{g.srv.Conv(cid)}
		sqlText, args = sqlReportsPageOf, append(args, cid)
	}
	var page []protocol.ServerReport
	for _, db := range pools { // each server's page, merged: the oldest limit+1 of them
		got, err := readReports(r.Context(), db, sqlText, args...)
		if err != nil {
			return err
		}
		page = append(page, got...)
	}
	slices.SortFunc(page, func(a, b protocol.ServerReport) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ReportID, b.ReportID)
	})
	a := protocol.ServerReports{Reports: page}
	if len(page) > int(limit) {
		a.Reports = page[:limit]
		last := a.Reports[limit-1]
		a.Next = reportCursor{at: last.CreatedAt, id: last.ReportID}.String()
	}
	if a.Reports == nil {
		a.Reports = []protocol.ServerReport{}
	}
	apierr.WriteJSON(w, http.StatusOK, a)
	return nil
}

// readReports runs a read of sqlServerReports on db.
func readReports(ctx context.Context, db *pgxpool.Pool, sqlText string, args ...any) ([]protocol.ServerReport, error) {
	rows, err := db.Query(ctx, sqlText, args...)
	if err != nil {
		return nil, fmt.Errorf("read reports: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (protocol.ServerReport, error) { return scanServerReport(row) })
	if err != nil {
		return nil, fmt.Errorf("read reports: %w", err)
	}
	return out, nil
}

// handleServerResolve is POST /v1/server/reports/{id}/resolve (scope
// reports): 200 with the report once resolved (the first resolution
// stands: resolving a resolved report answers it as it is), 202 pending.
func (g *Gateway) handleServerResolve(w http.ResponseWriter, r *http.Request) error {
	ctx, k := r.Context(), serviceFrom(r.Context())
	idem, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	var req protocol.ResolveReport
	if err := g.decodeBody(w, r, &req); err != nil {
		return err
	}
	id, err := input.ParseMsgID(r.PathValue("id"))
	if err != nil {
		return apierr.NotFound("no report %q", r.PathValue("id"))
	}
	conv, pending, err := g.reports.Resolve(ctx, write.ResolveRequest{ReportID: id, EventID: derivedID(k, "resolve", idem),
		Service: k.Actor(), Resolution: req.Resolution, Note: req.Note})
	switch {
	case errors.Is(err, write.ErrNoReport):
		return apierr.NotFound("no report %s", id)
	case err != nil:
		return err
	case pending:
		apierr.WriteJSON(w, http.StatusAccepted, protocol.ReportPending{ReportID: id, Status: protocol.StatusPending})
		return nil
	}
	a, err := scanServerReport(g.srv.Conv(conv).QueryRow(ctx, sqlReportByID, id))
	if err != nil {
		return fmt.Errorf("read the report %s: %w", id, err)
	}
	apierr.WriteJSON(w, http.StatusOK, a)
	return nil
}
