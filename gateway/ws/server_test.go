package ws

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/gateway/internal/ratelimit"
	"github.com/inboxd/inboxd/protocol"
)

// The handshake, admission and the server's end (docs/websocket.md,
// "Connecting" and "Shutdown"): refusals are close frames after the
// upgrade, with an error frame where the protocol has a code.

// TestRefusals: each refusal's frames and close code; the session is
// never registered.
func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   serverOpts
		before func(ts *testServer) // connections made first
		header http.Header
		code   int
		// the error frame before the close ("" none)
		errCode    string
		retryAfter int64
	}{
		{name: "no token", header: http.Header{}, code: protocol.CloseUnauthorized, errCode: protocol.CodeUnauthorized},
		{name: "bad token", header: http.Header{"Authorization": {"Bearer nope"}}, code: protocol.CloseUnauthorized, errCode: protocol.CodeUnauthorized},
		{name: "keys not loaded", header: http.Header{"Authorization": {"Bearer later"}},
			code: protocol.CloseTryAgainLater, errCode: protocol.CodeUnavailable, retryAfter: 0},
		{name: "origin not allowed", header: http.Header{"Authorization": {"Bearer 1"}, "Origin": {"https://evil.example"}},
			code: protocol.CloseNotAllowed},
		{name: "origin not in the list", opts: serverOpts{cfg: Config{AllowedOrigins: []string{"https://app.example"}}},
			header: http.Header{"Authorization": {"Bearer 1"}, "Origin": {"https://other.example"}}, code: protocol.CloseNotAllowed},
		{name: "connection rate", opts: serverOpts{connectLimits: ratelimit.New(rate.Every(time.Hour), 1)},
			before: func(ts *testServer) { ts.open(1) },
			header: http.Header{"Authorization": {"Bearer 1"}}, code: protocol.CloseRateLimited, errCode: protocol.CodeRateLimited, retryAfter: -1},
		{name: "per-user cap", opts: serverOpts{cfg: Config{MaxConnsPerUser: 1, RetryAfter: 2 * time.Second}},
			before: func(ts *testServer) { ts.open(1) },
			header: http.Header{"Authorization": {"Bearer 1"}}, code: protocol.CloseRateLimited, errCode: protocol.CodeRateLimited, retryAfter: 2000},
		{name: "node cap", opts: serverOpts{cfg: Config{MaxConns: 1, RetryAfter: 2 * time.Second}},
			before: func(ts *testServer) { ts.open(2) },
			header: http.Header{"Authorization": {"Bearer 1"}}, code: protocol.CloseRateLimited, errCode: protocol.CodeRateLimited, retryAfter: 2000},
		{name: "not admitted", opts: serverOpts{admission: &fakeAdmission{admit: false}},
			header: http.Header{"Authorization": {"Bearer 1"}}, code: protocol.CloseTryAgainLater, errCode: protocol.CodeUnavailable, retryAfter: 3000},
		{name: "draining", before: func(ts *testServer) { close(ts.draining) },
			header: http.Header{"Authorization": {"Bearer 1"}}, code: protocol.CloseServiceRestart},
		{name: "draining, with hints", opts: serverOpts{admission: &fakeAdmission{admit: true}}, before: func(ts *testServer) { close(ts.draining) },
			header: http.Header{"Authorization": {"Bearer 1"}}, code: protocol.CloseServiceRestart, errCode: protocol.CodeUnavailable, retryAfter: 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, tc.opts)
			if tc.before != nil {
				tc.before(ts)
			}
			sessions := ts.ws.Sessions()
			c, _, err := ts.dialHeader(tc.header)
			require.NoError(t, err, "refusals come after the upgrade")
			code, frames := c.closed()
			require.Equal(t, tc.code, code)
			if tc.errCode == "" {
				require.Empty(t, frames)
			} else {
				require.Len(t, frames, 1)
				require.Equal(t, protocol.FrameError, frames[0].Type)
				require.Equal(t, tc.errCode, frames[0].Code)
				switch tc.retryAfter {
				case -1:
					require.Positive(t, frames[0].RetryAfterMS)
				default:
					require.Equal(t, tc.retryAfter, frames[0].RetryAfterMS)
				}
			}
			require.Equal(t, sessions, ts.ws.Sessions(), "not registered")
		})
	}
}

// TestAccepted: what is not refused: a browser of the same origin or of a
// listed one, a token in the query, an admitted session (whose welcome
// carries the reconnect hint).
func TestAccepted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   serverOpts
		header func(ts *testServer) http.Header
		query  string
		hint   bool
	}{
		{name: "no origin", header: func(*testServer) http.Header { return http.Header{"Authorization": {"Bearer 1"}} }},
		{name: "same origin", header: func(ts *testServer) http.Header {
			return http.Header{"Authorization": {"Bearer 1"}, "Origin": {ts.http.URL}}
		}},
		{name: "a listed origin", opts: serverOpts{cfg: Config{AllowedOrigins: []string{"https://app.example"}}},
			header: func(*testServer) http.Header {
				return http.Header{"Authorization": {"Bearer 1"}, "Origin": {"https://APP.example"}}
			}},
		{name: "token in the query", query: "?access_token=1", header: func(*testServer) http.Header { return http.Header{} }},
		{name: "admitted", opts: serverOpts{admission: &fakeAdmission{admit: true}},
			header: func(*testServer) http.Header { return http.Header{"Authorization": {"Bearer 1"}} }, hint: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, tc.opts)
			var c *client
			if tc.query != "" {
				conn, _, err := dialURL(ts.url()+tc.query, tc.header(ts))
				require.NoError(t, err)
				<-ts.accepted
				t.Cleanup(func() { _ = conn.Close() })
				c = &client{t: t, conn: conn}
			} else {
				var err error
				c, _, err = ts.dialHeader(tc.header(ts))
				require.NoError(t, err)
			}
			c.hello(0, nil)
			w := c.next()
			require.Equal(t, protocol.FrameWelcome, w.Type)
			if tc.hint {
				require.Equal(t, &protocol.Reconnect{AfterMS: 250, WindowMS: 1}, w.Reconnect)
			} else {
				require.Nil(t, w.Reconnect)
			}
			require.Equal(t, 1, ts.ws.Sessions())
			info := ts.ws.Inspect()
			require.Len(t, info, 1)
			require.Equal(t, int64(1), info[0].User)
		})
	}
}

// TestHTTPAnswers: the two answers that are HTTP: a request that is not an
// upgrade (400) and the endpoint not running (503), in the error shape.
func TestHTTPAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		noRun   bool
		upgrade bool
		status  int
		code    string
	}{
		{name: "not an upgrade", status: http.StatusBadRequest, code: protocol.CodeBadRequest},
		{name: "not running", noRun: true, upgrade: true, status: http.StatusServiceUnavailable, code: protocol.CodeUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, serverOpts{noRun: tc.noRun})
			var resp *http.Response
			if tc.upgrade {
				_, r, err := dialURL(ts.url(), http.Header{"Authorization": {"Bearer 1"}})
				require.Error(t, err)
				resp = r
			} else {
				var err error
				resp, err = http.Get(ts.http.URL + "/v1/ws")
				require.NoError(t, err)
				require.Equal(t, "websocket", resp.Header.Get("Upgrade"))
			}
			<-ts.accepted
			defer resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode)
			var body protocol.ErrorBody
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			require.Equal(t, tc.code, body.Error.Code)
		})
	}
}

// TestDrain: a drain closes every session with 1012, after an error frame
// with a slot of its own to come back on when there are reconnect hints;
// the end of Run does the same, and the endpoint stops admitting.
func TestDrain(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hints bool
		end   func(ts *testServer)
	}{
		{name: "drain", end: func(ts *testServer) { close(ts.draining) }},
		{name: "drain with hints", hints: true, end: func(ts *testServer) { close(ts.draining) }},
		{name: "Run ends", end: func(ts *testServer) { go ts.stop() }},
		{name: "Run ends, with hints", hints: true, end: func(ts *testServer) { go ts.stop() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := serverOpts{}
			if tc.hints {
				opts.admission = &fakeAdmission{admit: true}
			}
			ts := newTestServer(t, opts)
			a, b := ts.dial(1), ts.dial(2)
			for _, c := range []*client{a, b} {
				c.hello(0, nil)
				require.Equal(t, protocol.FrameWelcome, c.next().Type)
			}
			tc.end(ts)
			after := map[int64]bool{}
			for _, c := range []*client{a, b} {
				code, frames := c.closed()
				require.Equal(t, protocol.CloseServiceRestart, code)
				if !tc.hints {
					require.Empty(t, frames)
					continue
				}
				require.Len(t, frames, 1)
				require.Equal(t, protocol.CodeUnavailable, frames[0].Code)
				require.True(t, frames[0].Retryable)
				after[frames[0].RetryAfterMS] = true
			}
			if tc.hints {
				require.Equal(t, map[int64]bool{1000: true, 1100: true}, after, "a slot each")
			}
			require.Eventually(t, func() bool { return ts.ws.Sessions() == 0 }, wait, time.Millisecond)
		})
	}
}

// TestRunTwice: Run runs once.
func TestRunTwice(t *testing.T) {
	ts := newTestServer(t, serverOpts{})
	require.Error(t, ts.ws.Run(t.Context()))
	ts.stop()
	require.False(t, ts.ws.Running())
	require.Error(t, ts.ws.Run(t.Context()), "nor again once stopped")
}

// TestNewRefuses: New refuses incomplete Deps and invalid Config at once.
func TestNewRefuses(t *testing.T) {
	ts := newTestServer(t, serverOpts{noRun: true})
	good := ts.ws.deps
	for name, d := range map[string]func(*Deps){
		"no inbox":  func(d *Deps) { d.Inbox = nil },
		"no hub":    func(d *Deps) { d.Hub = nil },
		"no auth":   func(d *Deps) { d.Auth = nil },
		"no sender": func(d *Deps) { d.Sender = nil },
		"no limits": func(d *Deps) { d.SendLimits = nil },
	} {
		deps := good
		d(&deps)
		_, err := New(Config{}, deps)
		require.Error(t, err, name)
	}
	_, err := New(Config{PushBatch: -1}, good)
	require.Error(t, err)
}
