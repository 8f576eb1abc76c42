package client

import (
	"errors"
	"time"

	"github.com/gorilla/websocket"

	"github.com/inboxd/inboxd/protocol"
)

// The reconnect hints of docs/protocol.md ("Reconnect hints"): the gateway
// says when to come back, and the client follows it instead of guessing
// with its backoff.
//
//   - A 1012 (drain) or 1013 (not admitted yet) preceded by an error frame
//     with retry_after_ms, and a 503 whose error body has retry_after_ms,
//     name a moment the gateway picked for this client, already spread
//     over the crowd: it is followed as it is, without the jitter added to
//     a Retry-After that every refused client was told alike (a 4029's, a
//     Retry-After header's).
//   - The welcome's reconnect {after_ms, window_ms} is for a connection
//     lost without a word (a crashed gateway): after one attempt at once,
//     which covers a network blip, a client whose attempt finds the
//     gateway away waits until after_ms plus a moment drawn over
//     window_ms from the loss, instead of guessing with the backoff. An
//     attempt after that which fails falls back to the backoff.

// crashPlan is the welcome's hint armed by a connection lost without a
// close frame: come back at `at`, if the first attempt finds the gateway
// away. Owned by the sync loop.
type crashPlan struct {
	at       time.Time
	attempts int // attempts since the loss
}

// noteReconnect keeps the welcome's hint for a later loss.
func (c *Client) noteReconnect(h *protocol.Reconnect) {
	if h == nil || h.AfterMS < 0 || h.WindowMS < 0 {
		c.crashHint.Store(nil)
		return
	}
	c.crashHint.Store(h)
}

// noteRetryAfterMS takes an error body's retry_after_ms over Retry-After.
func (e *APIError) noteRetryAfterMS(ms int64) {
	if ms > 0 {
		e.RetryAfter, e.hinted = min(time.Duration(ms)*time.Millisecond, time.Hour), true
	}
}

// exactRetryAfter reports whether err carries a moment the server picked
// for this client (spread over the crowd): to follow without jitter.
func exactRetryAfter(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.hinted
	}
	var ce *CloseError
	if errors.As(err, &ce) {
		return ce.RetryAfter > 0 && (ce.Code == CloseServiceRestart || ce.Code == CloseTryAgainLater)
	}
	return false
}

// unanswered reports whether err is a network failure: no HTTP answer and
// no close frame (a connection refused or reset while a killed gateway's
// socket goes away, a handshake that timed out).
func unanswered(err error) bool {
	var ae *APIError
	var ce *CloseError
	return err != nil && !errors.As(err, &ae) && (!errors.As(err, &ce) || ce.Code == websocket.CloseAbnormalClosure)
}

// closedWithHint reports whether err is a WebSocket closed by a starting
// (1013) or draining (1012 with retry_after_ms) gateway that said when to
// come back: the WebSocket path works, the gateway is away for a while.
func closedWithHint(err error) bool {
	var ce *CloseError
	return errors.As(err, &ce) && (ce.Code == CloseTryAgainLater || (ce.Code == CloseServiceRestart && ce.RetryAfter > 0))
}

// lostWithoutWord reports whether a session that was up ended without the
// server saying why: no close frame (1006, which is never sent, stands for
// a connection that ended without one) and no HTTP answer. A crash, a
// kill, a network cut.
func lostWithoutWord(err error) bool { return unanswered(err) }

// armCrashPlan arms the welcome's hint when an established session was
// lost without a word.
func (l *syncLoop) armCrashPlan(s syncSession) {
	l.crash = nil
	if !s.established() || !lostWithoutWord(s.err) {
		return
	}
	h := l.c.crashHint.Load()
	if h == nil {
		return
	}
	window := time.Duration(h.WindowMS) * time.Millisecond
	at := time.Now().Add(time.Duration(h.AfterMS)*time.Millisecond + l.jitter(window))
	l.crash = &crashPlan{at: at}
}

// crashWait is the wait the armed hint asks for after a failed attempt,
// false when the backoff decides: only the first attempt after the loss,
// only when it found the gateway away (refused, reset, timed out, or a
// 429/5xx: anything but an answer that says something else).
func (l *syncLoop) crashWait(s syncSession) (time.Duration, bool) {
	p := l.crash
	if p == nil || s.established() {
		// The lost session itself: the first attempt is the backoff's.
		return 0, false
	}
	p.attempts++
	if p.attempts > 1 || !(serverAway(s.err) || unanswered(s.err)) {
		l.crash = nil
		return 0, false
	}
	return max(0, time.Until(p.at)), true
}
