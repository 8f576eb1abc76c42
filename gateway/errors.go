package gateway

import (
	"context"
	"errors"
	"net/http"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

// Error is the one client-facing error: it becomes the body
// {"error":{"code","message","retryable"}} (protocol.ErrorBody) with Status;
// Code is one of the protocol's codes. Every handler returns errors;
// writeError maps anything else to an Error in one place (apierr.From).
type Error = apierr.Error

// writeError answers err. A request whose client is gone gets nothing.
func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, apierr.ErrClientGone) || (errors.Is(err, context.Canceled) && r.Context().Err() != nil) {
		// Nobody reads the answer; 499 only shows in the metrics.
		w.WriteHeader(499)
		return
	}
	e := apierr.From(err)
	switch {
	case e.Status >= 500 && e.Code == protocol.CodeInternal:
		g.log.Error("request failed", "route", r.Pattern, "user_id", userFrom(r.Context()), "code", e.Code, "err", err)
	case e.Status >= 500 && e.Err != nil:
		g.log.Warn("request failed", "route", r.Pattern, "user_id", userFrom(r.Context()), "code", e.Code, "err", err)
	}
	apierr.Write(w, e)
}
