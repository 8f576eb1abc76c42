// Package apierr is the gateway's one client-facing error type and its
// mapping: every error a handler returns (HTTP) or a session answers with
// (WebSocket) becomes an *Error, in one place (From), with one of the
// protocol's codes. It also writes the error shape of an HTTP answer. It
// is shared by the gateway's root and its WebSocket server so that neither
// needs the other for it; it must not depend on either.
package apierr

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
// Code is one of the protocol's codes. Handlers return errors; From maps
// anything else to an Error.
type Error struct {
	Status    int
	Code      string
	Message   string
	Retryable bool
	// RetryAfter is sent as Retry-After (whole seconds, at least 1) on 429
	// and 503.
	RetryAfter time.Duration
	// Hint says RetryAfter is a reconnect hint computed for this client (a
	// slot of the admission, a spread of a drain): the body also carries
	// it in milliseconds, retry_after_ms, since whole seconds would send a
	// crowd back in lumps.
	Hint bool
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

// BadRequest is a 400 bad_request.
func BadRequest(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: protocol.CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}

// NotMember is a 403 not_member.
func NotMember(format string, args ...any) *Error {
	return &Error{Status: http.StatusForbidden, Code: protocol.CodeNotMember, Message: fmt.Sprintf(format, args...)}
}

// Forbidden is a 403 forbidden: a member acting on what is not its own.
func Forbidden(format string, args ...any) *Error {
	return &Error{Status: http.StatusForbidden, Code: protocol.CodeForbidden, Message: fmt.Sprintf(format, args...)}
}

// NotFound is a 404 not_found.
func NotFound(format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Code: protocol.CodeNotFound, Message: fmt.Sprintf(format, args...)}
}

// Unauthorized is a 401 unauthorized.
func Unauthorized(msg string) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: protocol.CodeUnauthorized, Message: msg}
}

// TooLarge is a 413 payload_too_large.
func TooLarge(format string, args ...any) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: protocol.CodePayloadTooLarge, Message: fmt.Sprintf(format, args...)}
}

// HeaderTooLarge is a 431 header_too_large.
func HeaderTooLarge(size, limit int) *Error {
	return &Error{Status: http.StatusRequestHeaderFieldsTooLarge, Code: protocol.CodeHeaderTooLarge,
		Message: fmt.Sprintf("request header of %d bytes, over the limit of %d", size, limit)}
}

// Unavailable is a retryable 503 unavailable.
func Unavailable(msg string, retryAfter time.Duration, cause error) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: protocol.CodeUnavailable, Message: msg,
		Retryable: true, RetryAfter: retryAfter, Err: cause}
}

// ComeBack is a 503 unavailable whose RetryAfter is a reconnect hint
// (docs/protocol.md, "Reconnect hints").
func ComeBack(msg string, after time.Duration) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: protocol.CodeUnavailable, Message: msg,
		Retryable: true, RetryAfter: after, Hint: true}
}

// ErrClientGone marks a request whose client went away; nothing is written.
var ErrClientGone = errors.New("client gone")

// From maps any error of a handler to the client-facing Error.
func From(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return TooLarge("request body over %d bytes", mbe.Limit)
	}
	var inv *events.InvalidError
	if errors.As(err, &inv) {
		return BadRequest("%s", inv.Reason)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Unavailable("timed out, try again", time.Second, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08 connection, 53 resources, 57 operator intervention
		// (shutdown, cancel), 40 transaction rollback: all transient.
		switch pgErr.Code[:2] {
		case "08", "53", "57", "40":
			return Unavailable("database unavailable, try again", time.Second, err)
		}
		return &Error{Status: http.StatusInternalServerError, Code: protocol.CodeInternal, Message: "internal error", Retryable: true, Err: err}
	}
	var netErr net.Error
	if errors.As(err, &netErr) || pgconn.SafeToRetry(err) || isConnectError(err) {
		return Unavailable("backend unavailable, try again", time.Second, err)
	}
	return &Error{Status: http.StatusInternalServerError, Code: protocol.CodeInternal, Message: "internal error", Retryable: true, Err: err}
}

func isConnectError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

// Write answers e in the error shape: Retry-After on 429 and 503, then the
// body. It neither logs nor looks at the request; the caller does.
func Write(w http.ResponseWriter, e *Error) {
	if e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable {
		secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
		if secs < 1 {
			secs = 1
		}
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	d := protocol.ErrorDetail{Code: e.Code, Message: e.Message, Retryable: e.Retryable}
	if e.Hint {
		d.RetryAfterMS = max(1, e.RetryAfter.Milliseconds())
	}
	WriteJSON(w, e.Status, protocol.ErrorBody{Error: d})
}

// WriteJSON writes v with status. HTML escaping is off: bodies are JSON for
// programs, not HTML.
func WriteJSON(w http.ResponseWriter, status int, v any) {
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
