package client

import (
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// TestHintFollowedExactly: a moment the server picked for this client
// (retry_after_ms of a 1012 or 1013, or of a 503 body) is waited out as
// it is; a Retry-After told to every refused client alike (a 4029's, a
// header's) keeps its jitter.
func TestHintFollowedExactly(t *testing.T) {
	p := testPolicy()
	for _, err := range []error{
		&CloseError{Code: CloseServiceRestart, RetryAfter: 2345 * time.Millisecond},
		&CloseError{Code: CloseTryAgainLater, RetryAfter: 2345 * time.Millisecond},
		func() error { e := &APIError{Status: 503}; e.noteRetryAfterMS(2345); return e }(),
	} {
		for i := 0; i < 10; i++ {
			d, _ := p.failed(err, true, 0)
			require.Equal(t, 2345*time.Millisecond, d, "%v", err)
		}
		require.True(t, serverAway(err), "%v: the gateway away, not the WebSocket failing", err)
	}
	jittered := false
	for i := 0; i < 20; i++ {
		d, _ := p.failed(&CloseError{Code: CloseRateLimited, RetryAfter: 2 * time.Second}, true, 0)
		require.GreaterOrEqual(t, d, 2*time.Second)
		jittered = jittered || d > 2*time.Second
	}
	require.True(t, jittered, "a 4029's retry_after_ms is the same for every client: jittered")
	// A bare 1012 (an old gateway, or hints off) is the backoff's.
	require.False(t, exactRetryAfter(&CloseError{Code: CloseServiceRestart}))
	require.False(t, serverAway(&CloseError{Code: CloseServiceRestart}))
}

// TestRetryAfterMSOfBody: the error body's retry_after_ms wins over the
// whole seconds of Retry-After.
func TestRetryAfterMSOfBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "2")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"starting","retryable":true,"retry_after_ms":1250}}`))
	}))
	defer srv.Close()
	c, err := New(Config{BaseURL: srv.URL, Token: "t"})
	require.NoError(t, err)
	_, _, _, err = c.api.sync(t.Context(), syncRequest{})
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, 1250*time.Millisecond, ae.RetryAfter)
	require.True(t, exactRetryAfter(err))
}

// TestCrashPlan: after a session lost without a close frame, the first
// attempt is the backoff's; if it finds the gateway away, the wait is the
// welcome's hint from the loss; the attempt after that is the backoff's
// again. A loss with a close frame, or no hint, arms nothing.
func TestCrashPlan(t *testing.T) {
	c := &Client{}
	c.noteReconnect(&protocol.Reconnect{AfterMS: 4000, WindowMS: 1000})
	l := &syncLoop{c: c, rnd: rand.New(rand.NewPCG(5, 6))}
	lost := syncSession{upAt: time.Now().Add(-time.Minute), lasted: time.Minute, err: errors.New("unexpected EOF")}
	refused := syncSession{err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}

	l.armCrashPlan(lost)
	require.NotNil(t, l.crash)
	_, ok := l.crashWait(lost)
	require.False(t, ok, "the first attempt is the backoff's")
	d, ok := l.crashWait(refused)
	require.True(t, ok)
	require.GreaterOrEqual(t, d, 3900*time.Millisecond)
	require.LessOrEqual(t, d, 5000*time.Millisecond)
	_, ok = l.crashWait(refused)
	require.False(t, ok, "after the hinted attempt, the backoff again")
	require.Nil(t, l.crash)

	// A reset or a timeout (no answer at all) finds the gateway away too.
	l.armCrashPlan(lost)
	_, ok = l.crashWait(syncSession{err: errors.New("read: connection reset by peer")})
	require.True(t, ok)

	// The first attempt got an answer other than "away": no plan.
	l.armCrashPlan(lost)
	_, ok = l.crashWait(syncSession{err: &APIError{Status: 500}})
	require.False(t, ok)

	// A TCP close without a close frame (1006, what a killed gateway
	// leaves) arms it too.
	l.armCrashPlan(syncSession{upAt: time.Now(), err: &CloseError{Code: 1006}})
	require.NotNil(t, l.crash)

	// A close frame said why: no plan.
	l.armCrashPlan(syncSession{upAt: time.Now(), err: &CloseError{Code: CloseTooSlow}})
	require.Nil(t, l.crash)

	// An HTTP answer said why (a long-poll's 503): no plan.
	l.armCrashPlan(syncSession{upAt: time.Now(), err: &APIError{Status: 503}})
	require.Nil(t, l.crash)

	// No hint from the gateway: no plan.
	c.noteReconnect(nil)
	l.armCrashPlan(lost)
	require.Nil(t, l.crash)
}
