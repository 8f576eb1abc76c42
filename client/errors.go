package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/inboxd/inboxd/protocol"
)

// Error codes of docs/protocol.md, under the SDK's names (declared in protocol).
const (
	CodeBadRequest      = protocol.CodeBadRequest
	CodeUnauthorized    = protocol.CodeUnauthorized
	CodeNotMember       = protocol.CodeNotMember
	CodeForbidden       = protocol.CodeForbidden // a change of someone else's message
	CodeNotFound        = protocol.CodeNotFound
	CodePayloadTooLarge = protocol.CodePayloadTooLarge
	CodeRateLimited     = protocol.CodeRateLimited
	CodeUnavailable     = protocol.CodeUnavailable
	CodeInternal        = protocol.CodeInternal
)

// WebSocket close codes of docs/protocol.md, under the SDK's names (declared in
// protocol).
const (
	CloseUnauthorized   = protocol.CloseUnauthorized   // stop: the token is refused
	CloseNotAllowed     = protocol.CloseNotAllowed     // stop: the connection is not allowed
	CloseTooSlow        = protocol.CloseTooSlow        // reconnect with the cursor
	CloseRateLimited    = protocol.CloseRateLimited    // reconnect after retry_after
	CloseServiceRestart = protocol.CloseServiceRestart // reconnect after retry_after_ms when given, else with jittered backoff
	CloseTryAgainLater  = protocol.CloseTryAgainLater  // not admitted yet: reconnect after retry_after_ms
	CloseGoingAway      = protocol.CloseGoingAway      // reconnect with jittered backoff
)

var (
	// ErrRunning is returned by Run while another Run of the same Client
	// is active.
	ErrRunning = errors.New("client: Run is already running")
	// ErrInHandler is returned by calls that must not be made from inside
	// a Handler callback (they would wait for the callback to return).
	ErrInHandler = errors.New("client: called from inside a handler")
	// ErrSyncDisabled is returned by calls that need the inbox when
	// Config.DisableSync is set.
	ErrSyncDisabled = errors.New("client: sync is disabled")
)

// APIError is a non-2xx answer of the gateway: the error body of
// docs/protocol.md plus the status and Retry-After.
type APIError struct {
	Op         string // the request, "GET /v1/sync"
	Status     int
	Code       string
	Message    string
	Retryable  bool          // the server's retryable flag
	RetryAfter time.Duration // Retry-After, 0 when absent
	// hinted: RetryAfter is the body's retry_after_ms, a moment the
	// server picked for this client (hints.go).
	hinted bool
}

func (e *APIError) Error() string {
	code := e.Code
	if code == "" {
		code = http.StatusText(e.Status)
	}
	s := fmt.Sprintf("%s: %d %s", e.Op, e.Status, code)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Temporary reports whether trying again later can succeed: 408, 429 and
// 5xx (the status decides, whatever the body says).
func (e *APIError) Temporary() bool {
	return e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// CloseError is a WebSocket connection closed by the server with a code.
type CloseError struct {
	Code   int
	Reason string
	// RetryAfter is the retry_after_ms of the error frame that preceded
	// the close, if any.
	RetryAfter time.Duration
	// Frame is the error frame that preceded the close, if any.
	Frame *APIError
}

func (e *CloseError) Error() string {
	s := "websocket closed with " + strconv.Itoa(e.Code)
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	if e.Frame != nil {
		s += ": " + e.Frame.Code + ": " + e.Frame.Message
	}
	return s
}

// Temporary reports whether reconnecting can succeed: every code but 4001
// and 4003.
func (e *CloseError) Temporary() bool {
	return e.Code != CloseUnauthorized && e.Code != CloseNotAllowed
}

// PermanentError stops Run: the server refused the client in a way that
// trying again cannot fix (HTTP 400, 401, 403, 404; WebSocket close 4001,
// 4003). Status, CloseCode and Code say which; Err is the *APIError or
// *CloseError.
type PermanentError struct {
	Op        string
	Status    int    // HTTP status, 0 when the refusal was a close code
	CloseCode int    // WebSocket close code, 0 when it was an HTTP status
	Code      string // protocol error code (unauthorized, not_member, bad_request, …) when known
	Err       error
}

func (e *PermanentError) Error() string {
	return "client stopped, permanent error: " + e.Err.Error()
}

func (e *PermanentError) Unwrap() error { return e.Err }

// IsPermanent reports whether err (or what it wraps) is a *PermanentError.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// permanent wraps err in a *PermanentError when retrying cannot help; it
// returns nil for temporary errors.
func permanent(err error) *PermanentError {
	var p *PermanentError
	if errors.As(err, &p) {
		return p
	}
	var ae *APIError
	if errors.As(err, &ae) && !ae.Temporary() {
		return &PermanentError{Op: ae.Op, Status: ae.Status, Code: ae.Code, Err: ae}
	}
	var ce *CloseError
	if errors.As(err, &ce) && !ce.Temporary() {
		code := CodeUnauthorized
		if ce.Code == CloseNotAllowed {
			code = "not_allowed"
		}
		if ce.Frame != nil && ce.Frame.Code != "" {
			code = ce.Frame.Code
		}
		return &PermanentError{Op: "websocket", CloseCode: ce.Code, Code: code, Err: ce}
	}
	return nil
}

// retryAfter is the server's requested delay carried by err, 0 if none.
func retryAfter(err error) time.Duration {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.RetryAfter
	}
	var ce *CloseError
	if errors.As(err, &ce) {
		return ce.RetryAfter
	}
	return 0
}

// fatalError is an error of the app or the store, not of the network: Run
// stops with it at once.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

func fatal(format string, args ...any) error {
	return &fatalError{err: fmt.Errorf(format, args...)}
}

func isFatal(err error) bool {
	var f *fatalError
	return errors.As(err, &f)
}

// isCtx reports whether err is ctx ending.
func isCtx(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || err == ctx.Err())
}
