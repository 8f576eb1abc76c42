package events

import (
	"slices"

	"github.com/google/uuid"
)

// Reports of messages (docs/protocol.md, "Reports"): a member who can see
// a message reports it to the moderators (message.reported, the member is
// the actor), and a service resolves the report through the server API
// (report.resolved, actor 0). Both are keyed by the conversation, so that
// a report and its resolution are ordered in one partition; neither
// changes the message or gives anyone an inbox entry.

// MaxReportNote bounds a report's or a resolution's note in bytes.
const MaxReportNote = 1000

// ReportReasons is every reason a report may give, in the order the docs
// list them.
var ReportReasons = []string{"spam", "harassment", "hate", "violence", "sexual", "self_harm", "illegal", "other"}

// Resolutions of a report.
const (
	// ResolutionDismissed: the moderators found nothing to act on.
	ResolutionDismissed = "dismissed"
	// ResolutionActioned: the moderators acted (deleted the message,
	// removed the sender, ...: through the API's other routes).
	ResolutionActioned = "actioned"
)

// ValidReportReason says whether s is one of ReportReasons.
func ValidReportReason(s string) bool { return slices.Contains(ReportReasons, s) }

// ValidResolution says whether s is a resolution.
func ValidResolution(s string) bool { return s == ResolutionDismissed || s == ResolutionActioned }

// ValidReportNote checks a note: at most MaxReportNote bytes of storable
// text.
func ValidReportNote(s string) error {
	if len(s) > MaxReportNote {
		return invalid("note over %d bytes", MaxReportNote)
	}
	return storableText("note", s)
}

// validateReport checks the fields of message.reported and
// report.resolved.
func (e *Event) validateReport() error {
	if _, err := uuid.Parse(e.ReportID); err != nil || len(e.ReportID) != 36 {
		return invalid("report_id is not a uuid")
	}
	if err := ValidReportNote(e.Note); err != nil {
		return err
	}
	switch e.Type {
	case MessageReported:
		switch {
		case e.Seq <= 0:
			return invalid("seq must be positive")
		case !ValidReportReason(e.Reason):
			return invalid("reason %q is not a report reason", e.Reason)
		case e.Resolution != "":
			return invalid("resolution on a %s", e.Type)
		case e.ActorID == 0:
			return invalid("a report is a user's")
		}
	case ReportResolved:
		switch {
		case e.ActorID != 0 || e.Service == "":
			return invalid("a report is resolved by a service (actor_id 0, service set)")
		case !ValidResolution(e.Resolution):
			return invalid("resolution %q is neither %s nor %s", e.Resolution, ResolutionDismissed, ResolutionActioned)
		case e.Reason != "" || e.Seq != 0:
			return invalid("reason or seq on a %s", e.Type)
		}
	}
	return nil
}
