package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/protocol"
)

// Error is the one client-facing error: it becomes the body
// {"error":{"code","message","retryable"}} (protocol.ErrorBody) with Status;
// Code is one of the protocol's codes. Every handler returns
// errors; writeError maps anything else to an Error in one place.
type Error struct {
	Status    int
	Code      string
	Message   string
	Retryable bool
	// RetryAfter is sent as Retry-After (whole seconds, at least 1) on 429
	// and 503.
	RetryAfter time.Duration
	// Err is the cause, logged and never shown to the client.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func badRequest(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: protocol.CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}

func notMember(format string, args ...any) *Error {
	return &Error{Status: http.StatusForbidden, Code: protocol.CodeNotMember, Message: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Code: protocol.CodeNotFound, Message: fmt.Sprintf(format, args...)}
}

func unauthorized(msg string) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: protocol.CodeUnauthorized, Message: msg}
}

func tooLarge(format string, args ...any) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: protocol.CodePayloadTooLarge, Message: fmt.Sprintf(format, args...)}
}

func headerTooLarge(size, limit int) *Error {
	return &Error{Status: http.StatusRequestHeaderFieldsTooLarge, Code: protocol.CodeHeaderTooLarge,
		Message: fmt.Sprintf("request header of %d bytes, over the limit of %d", size, limit)}
}

func unavailable(msg string, retryAfter time.Duration, cause error) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: protocol.CodeUnavailable, Message: msg,
		Retryable: true, RetryAfter: retryAfter, Err: cause}
}

// errClientGone marks a request whose client went away; nothing is written.
var errClientGone = errors.New("client gone")

// toError maps any error of a handler to the client-facing Error.
func toError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge("request body over %d bytes", mbe.Limit)
	}
	var inv *events.InvalidError
	if errors.As(err, &inv) {
		return badRequest("%s", inv.Reason)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return unavailable("timed out, try again", time.Second, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08 connection, 53 resources, 57 operator intervention
		// (shutdown, cancel), 40 transaction rollback: all transient.
		switch pgErr.Code[:2] {
		case "08", "53", "57", "40":
			return unavailable("database unavailable, try again", time.Second, err)
		}
		return &Error{Status: http.StatusInternalServerError, Code: protocol.CodeInternal, Message: "internal error", Retryable: true, Err: err}
	}
	var netErr net.Error
	if errors.As(err, &netErr) || pgconn.SafeToRetry(err) || isConnectError(err) {
		return unavailable("backend unavailable, try again", time.Second, err)
	}
	return &Error{Status: http.StatusInternalServerError, Code: protocol.CodeInternal, Message: "internal error", Retryable: true, Err: err}
}

func isConnectError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

// writeError answers err. A request whose client is gone gets nothing.
func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errClientGone) || (errors.Is(err, context.Canceled) && r.Context().Err() != nil) {
		// Nobody reads the answer; 499 only shows in the metrics.
		w.WriteHeader(499)
		return
	}
	e := toError(err)
	switch {
	case e.Status >= 500 && e.Code == protocol.CodeInternal:
		g.log.Error("request failed", "route", r.Pattern, "user_id", userFrom(r.Context()), "code", e.Code, "err", err)
	case e.Status >= 500 && e.Err != nil:
		g.log.Warn("request failed", "route", r.Pattern, "user_id", userFrom(r.Context()), "code", e.Code, "err", err)
	}
	if e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable {
		secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
		if secs < 1 {
			secs = 1
		}
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	writeJSON(w, e.Status, protocol.ErrorBody{Error: protocol.ErrorDetail{Code: e.Code, Message: e.Message, Retryable: e.Retryable}})
}

// writeJSON writes v with status. HTML escaping is off: bodies are JSON for
// programs, not HTML.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	if h.Get("Cache-Control") == "" {
		h.Set("Cache-Control", "no-store")
	}
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
