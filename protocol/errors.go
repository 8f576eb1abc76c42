package protocol

// Error codes of docs/protocol.md: the code of every error body and error frame.
// The HTTP status of each is in docs/protocol.md.
const (
	CodeBadRequest      = "bad_request"       // 400, 405
	CodeUnauthorized    = "unauthorized"      // 401
	CodeNotMember       = "not_member"        // 403
	CodeForbidden       = "forbidden"         // 403: a member acting on another's message
	CodeNotFound        = "not_found"         // 404
	CodePayloadTooLarge = "payload_too_large" // 413
	CodeHeaderTooLarge  = "header_too_large"  // 431
	CodeRateLimited     = "rate_limited"      // 429, retryable
	CodeUnavailable     = "unavailable"       // 503, retryable
	CodeInternal        = "internal"          // 500, retryable
)

// ErrorBody is every non-2xx JSON answer:
// {"error":{"code","message","retryable"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error of an ErrorBody.
type ErrorDetail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	// RetryAfterMS is the wait of a 503 that says when to come back (a
	// drained long-poll, a session not admitted yet) in milliseconds,
	// which Retry-After (whole seconds) cannot say: a crowd told to come
	// back at one-second steps would come back in lumps. Absent elsewhere.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}
