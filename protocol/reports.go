package protocol

import "time"

// Reports of messages (docs/protocol.md, "Reports"): a member reports a
// message to the moderators; the product's back end reads the queue and
// resolves reports through the server API.

// ReportMessage is the body of POST
// /v1/conversations/{cid}/messages/{seq}/report. ReportID is the report's
// idempotency key (a uuid; or the Idempotency-Key header); Reason is one
// of the reasons docs/protocol.md lists; Note is at most 1000 bytes.
type ReportMessage struct {
	ReportID string `json:"report_id,omitempty"`
	Reason   string `json:"reason"`
	Note     string `json:"note,omitempty"`
}

// Report is a report as its reporter sees it: the 201 of a report, the
// same for every retry of its report id. Whether and how moderators
// resolved it is not the reporter's to see.
type Report struct {
	ReportID       string    `json:"report_id"`
	ConversationID int64     `json:"conversation_id"`
	Seq            int64     `json:"seq"`
	Reason         string    `json:"reason"`
	Note           string    `json:"note"`
	CreatedAt      time.Time `json:"created_at"`
}

// ReportPending is the 202 of a report appended but not yet projected:
// retry with the same ReportID. Status is StatusPending.
type ReportPending struct {
	ReportID string `json:"report_id"`
	Status   string `json:"status"`
}

// The states of a report.
const (
	ReportOpen     = "open"
	ReportResolved = "resolved"
)

// ServerReport is a report as the server API answers it: the report,
// its state and resolution, and the reported message as it is now (Body
// is its current text, nil once it is deleted: a delete erases it for
// moderators too).
type ServerReport struct {
	ReportID       string    `json:"report_id"`
	ConversationID int64     `json:"conversation_id"`
	Seq            int64     `json:"seq"`
	MsgID          string    `json:"msg_id"`
	SenderID       int64     `json:"sender_id"`
	ReporterID     int64     `json:"reporter_id"`
	Reason         string    `json:"reason"`
	Note           string    `json:"note"`
	CreatedAt      time.Time `json:"created_at"`
	State          string    `json:"state"`
	// Resolution, ResolutionNote, ResolvedBy (the API key's
	// "<id>:<name>") and ResolvedAt are set once resolved.
	Resolution     string     `json:"resolution,omitempty"`
	ResolutionNote string     `json:"resolution_note,omitempty"`
	ResolvedBy     string     `json:"resolved_by,omitempty"`
	ResolvedAt     *time.Time `json:"resolved_at,omitempty"`
	Body           *string    `json:"body"`
	Deleted        bool       `json:"deleted"`
}

// ServerReports is a page of GET /v1/server/reports: Next, when set, is
// the after= of the next page.
type ServerReports struct {
	Reports []ServerReport `json:"reports"`
	Next    string         `json:"next,omitempty"`
}

// ResolveReport is the body of POST /v1/server/reports/{id}/resolve:
// Resolution is "dismissed" or "actioned"; Note at most 1000 bytes.
type ResolveReport struct {
	Resolution string `json:"resolution"`
	Note       string `json:"note,omitempty"`
}
