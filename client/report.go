package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/google/uuid"

	"github.com/inboxd/inboxd/protocol"
)

// Report is what a report of a message answers (protocol.Report).
type Report = protocol.Report

// ReportOptions says why a message is reported: Reason is one of
// docs/protocol.md's ("spam", "harassment", "hate", "violence", "sexual",
// "self_harm", "illegal", "other"); Note (at most 1000 bytes) is for the
// moderators. ReportID is the report's idempotency key, made when empty.
type ReportOptions struct {
	Reason, Note string
	ReportID     string
}

// ReportResult is the report as the server took it, or Pending (appended,
// not yet projected: it will be, and ReportMessage again with the same
// ReportID answers it).
type ReportResult struct {
	ReportID string
	Report   *Report
	Pending  bool
}

// ReportMessage reports message seq of conversationID to the deployment's
// moderators (docs/protocol.md, "Reports"). Nobody else is told; the
// reporter keeps seeing the message. Temporary failures are retried with
// the same report id as ApplyChange retries a change, until ctx ends;
// a refusal is an *APIError (403 not_member, 404 a message the user
// cannot see, 400 a system message, one's own, an unknown reason, 413 a
// note too long). It does not need Run.
func (c *Client) ReportMessage(ctx context.Context, conversationID, seq int64, o ReportOptions) (ReportResult, error) {
	if conversationID <= 0 || seq <= 0 {
		return ReportResult{}, fmt.Errorf("client: bad message %d/%d", conversationID, seq)
	}
	if o.Reason == "" {
		return ReportResult{}, errors.New("client: a report needs a reason")
	}
	if o.ReportID == "" {
		o.ReportID = uuid.NewString()
	}
	res := ReportResult{ReportID: o.ReportID}
	path := "/v1/conversations/" + strconv.FormatInt(conversationID, 10) + "/messages/" + strconv.FormatInt(seq, 10) + "/report"
	body := protocol.ReportMessage{ReportID: o.ReportID, Reason: o.Reason, Note: o.Note}
	pol := newPolicy(&c.cfg, c.newRand())
	for {
		var r Report
		status, _, err := c.api.do(ctx, http.MethodPost, path, nil, body, nil, &r, 0)
		if err == nil {
			if status == http.StatusAccepted || r.ReportID == "" {
				res.Pending = true
			} else {
				res.Report = &r
			}
			return res, nil
		}
		if ctx.Err() != nil || !changeRetryable(err) {
			return res, err
		}
		wait, _ := pol.failed(err, false, 0)
		c.log.Info("report failed, retrying", "report_id", o.ReportID, "conversation_id", conversationID, "seq", seq,
			"err", err, "retry_in", wait)
		if !sleepCtx(ctx, wait) {
			return res, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		}
	}
}
