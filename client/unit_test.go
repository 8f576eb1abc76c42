package client

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// TestHoleSet checks add/remove/contains against a set of seqs, over
// random operations.
func TestHoleSet(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		var hs holeSet
		model := map[int64]bool{}
		for op := 0; op < 30; op++ {
			from := rnd.Int64N(60) + 1
			to := from + rnd.Int64N(10) - 2
			if rnd.IntN(3) > 0 {
				hs = hs.add(from, to)
				for s := from; s <= to; s++ {
					model[s] = true
				}
			} else {
				hs = hs.remove(from, to)
				for s := from; s <= to; s++ {
					delete(model, s)
				}
			}
			for s := int64(0); s <= 75; s++ {
				require.Equal(t, model[s], hs.contains(s), "round %d op %d seq %d holes %v", round, op, s, hs)
			}
			for i, h := range hs {
				require.LessOrEqual(t, h.From, h.To, "%v", hs)
				if i > 0 {
					require.Greater(t, h.From, hs[i-1].To+1, "sorted, disjoint, not adjacent: %v", hs)
				}
			}
		}
	}
	n, ok := holeSet{{1, 3}, {7, 9}}.newest()
	require.True(t, ok)
	require.Equal(t, Hole{7, 9}, n)
	_, ok = holeSet(nil).newest()
	require.False(t, ok)
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"3", 3 * time.Second},
		{"0", 0},
		{"-1", 0},
		{"junk", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"999999999", 24 * time.Hour},
	} {
		require.Equal(t, tc.want, parseRetryAfter(tc.in, now), "%q", tc.in)
	}
}

func testPolicy() *policy {
	c := Config{BackoffInitial: 100 * time.Millisecond, BackoffMax: time.Second, StablePeriod: 10 * time.Second,
		BreakerThreshold: 3, BreakerCooldown: 5 * time.Second}
	return newPolicy(&c, rand.New(rand.NewPCG(3, 4)))
}

// TestPolicyBackoff: full jitter under a cap that doubles to BackoffMax;
// the backoff restarts only after a session stayed up for the stable
// period; Retry-After wins.
func TestPolicyBackoff(t *testing.T) {
	p := testPolicy()
	caps := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i, c := range caps {
		// established, so that the breaker stays out of it
		d, opened := p.failed(errors.New("x"), true, time.Second)
		require.False(t, opened)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, c*time.Millisecond, "attempt %d", i)
	}
	// A short session does not reset: the cap stays at the max.
	var maxSeen time.Duration
	for i := 0; i < 50; i++ {
		d, _ := p.failed(errors.New("x"), true, time.Second)
		maxSeen = max(maxSeen, d)
	}
	require.Greater(t, maxSeen, 400*time.Millisecond, "the cap was reset by short sessions")
	// A stable session resets to the initial cap.
	d, _ := p.failed(errors.New("x"), true, 11*time.Second)
	require.LessOrEqual(t, d, 100*time.Millisecond)

	// Retry-After: at least what the server said, at most a fifth more.
	ra := &APIError{Status: 429, RetryAfter: 2 * time.Second}
	for i := 0; i < 20; i++ {
		d, _ := p.failed(ra, true, 0)
		require.GreaterOrEqual(t, d, 2*time.Second)
		require.LessOrEqual(t, d, 2*time.Second+400*time.Millisecond)
	}
	ce := &CloseError{Code: CloseRateLimited, RetryAfter: 3 * time.Second}
	d, _ = p.failed(ce, true, 0)
	require.GreaterOrEqual(t, d, 3*time.Second)
}

// TestPolicyBreaker: threshold failures in a row open the circuit (the
// wait covers the cool-down); the next attempt is a probe whose failure
// opens it again at once; a success closes it.
func TestPolicyBreaker(t *testing.T) {
	p := testPolicy()
	err := errors.New("connection refused")
	for i := 0; i < 2; i++ {
		_, opened := p.failed(err, false, 0)
		require.False(t, opened)
	}
	d, opened := p.failed(err, false, 0)
	require.True(t, opened)
	require.GreaterOrEqual(t, d, 5*time.Second)
	require.LessOrEqual(t, d, 6*time.Second)
	// The probe fails: open again.
	_, opened = p.failed(err, false, 0)
	require.True(t, opened)
	// The probe gets through: closed, and failures count from zero.
	p.succeeded()
	for i := 0; i < 2; i++ {
		_, opened = p.failed(err, false, 0)
		require.False(t, opened)
	}
	_, opened = p.failed(err, false, 0)
	require.True(t, opened)
	// An established session that fails does not count.
	p.succeeded()
	for i := 0; i < 10; i++ {
		_, opened = p.failed(err, true, 0)
		require.False(t, opened)
	}
}

func TestPermanentClassification(t *testing.T) {
	for _, tc := range []struct {
		err  error
		perm bool
	}{
		{&APIError{Status: 400}, true},
		{&APIError{Status: 401}, true},
		{&APIError{Status: 403}, true},
		{&APIError{Status: 404}, true},
		{&APIError{Status: 408}, false},
		{&APIError{Status: 429}, false},
		{&APIError{Status: 500}, false},
		{&APIError{Status: 503}, false},
		{&CloseError{Code: 4001}, true},
		{&CloseError{Code: 4003}, true},
		{&CloseError{Code: 4008}, false},
		{&CloseError{Code: 4029}, false},
		{&CloseError{Code: 1012}, false},
		{&CloseError{Code: 1001}, false},
		{&CloseError{Code: 1006}, false},
		{errors.New("EOF"), false},
	} {
		require.Equal(t, tc.perm, permanent(tc.err) != nil, "%v", tc.err)
	}
	p := permanent(&CloseError{Code: 4001, Frame: &APIError{Code: CodeUnauthorized}})
	require.Equal(t, CloseUnauthorized, p.CloseCode)
	require.Equal(t, CodeUnauthorized, p.Code)
	require.True(t, sendPermanent(&APIError{Status: 413}))
	require.False(t, sendPermanent(&APIError{Status: 401}))
	require.False(t, sendPermanent(&APIError{Status: 503}))
}

// TestFileStore: save and load round-trip, atomic replacement (no
// temporary files left), one process per file.
func TestFileStore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub", "state.json")
	fs, err := OpenFileStore(path)
	require.NoError(t, err)
	st, err := fs.Load(ctx)
	require.NoError(t, err)
	require.Nil(t, st)

	s := newState()
	s.Epoch, s.Cursor, s.RecordVersion = 7, 42, 9
	s.Conversations[5] = &ConversationState{LastSeq: 30, Version: 3, Holes: []Hole{{2, 10}, {20, 25}}}
	s.Outbox = []OutboxItem{{MsgID: "0b0f6c1e-1d1b-4a5e-9a55-1b2c3d4e5f60", ConversationID: 5, Body: "hi", Queued: time.Unix(1, 0).UTC()}}
	for i := 0; i < 3; i++ {
		s.Cursor++
		require.NoError(t, fs.Save(ctx, s))
	}
	got, err := fs.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, s, got)
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.ElementsMatch(t, []string{"state.json", "state.json.lock"}, names)
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	_, err = OpenFileStore(path)
	require.Error(t, err)
	require.NoError(t, fs.Close())
	fs2, err := OpenFileStore(path)
	require.NoError(t, err)
	require.NoError(t, fs2.Close())
	require.Error(t, fs.Save(ctx, s), "a closed store refuses to save")

	// A clone shares nothing.
	c := s.Clone()
	c.Conversations[5].Holes[0].From = 99
	c.Outbox[0].Body = "changed"
	require.Equal(t, int64(2), s.Conversations[5].Holes[0].From)
	require.Equal(t, "hi", s.Outbox[0].Body)
}

func TestLatestRecords(t *testing.T) {
	got := latestRecords([]Record{{ConversationID: 1, Version: 2}, {ConversationID: 2, Version: 5},
		{ConversationID: 1, Version: 4}, {ConversationID: 1, Version: 3}})
	require.Equal(t, []Record{{ConversationID: 1, Version: 4}, {ConversationID: 2, Version: 5}}, got)
}

func TestConfig(t *testing.T) {
	_, err := New(Config{})
	require.Error(t, err)
	_, err = New(Config{BaseURL: "http://x"})
	require.ErrorContains(t, err, "Token")
	_, err = New(Config{BaseURL: "ftp://x", Token: "t"})
	require.Error(t, err)
	_, err = New(Config{BaseURL: "http://x", Token: "t", LongPollWait: 31 * time.Second})
	require.Error(t, err)
	c, err := New(Config{BaseURL: "https://chat.example.com/api/", Token: "t"})
	require.NoError(t, err)
	require.Equal(t, "wss://chat.example.com/api/v1/ws", c.wsURL)
	require.Equal(t, "https://chat.example.com/api/v1/sync?after=1", c.api.url("/v1/sync", map[string][]string{"after": {"1"}}))
	require.Equal(t, DefaultLongPollWait, c.cfg.LongPollWait)
	require.Equal(t, DefaultCommitEvery, c.cfg.CommitEvery)
}

// FuzzFrame: any server frame decodes without panicking, and error frames
// classify.
func FuzzFrame(f *testing.F) {
	f.Add([]byte(`{"type":"welcome","epoch":1,"head":5,"heartbeat_ms":20000}`))
	f.Add([]byte(`{"type":"entries","entries":[{"inbox_seq":1,"conversation_id":2,"kind":"message","message":{"seq":1,"body":"hi"}}],"head":1}`))
	f.Add([]byte(`{"type":"send_ack","msg_id":"x","conversation_id":1,"seq":3}`))
	f.Add([]byte(`{"type":"error","code":"rate_limited","message":"slow down","retry_after_ms":500}`))
	f.Add([]byte(`{"type":"too_long","epoch":1,"head":900,"conversations":[{"conversation_id":1,"last_seq":4}],"next_page":"abc"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var fr protocol.ServerFrame
		if json.Unmarshal(raw, &fr) != nil {
			return
		}
		e := frameError(&fr, "websocket")
		_ = e.Error()
		_ = permanent(e)
		for _, en := range fr.Entries {
			if en.Message != nil {
				_ = en.Message.Text()
			}
		}
	})
}

// TestAPIErrors: the error body, Retry-After and, for a 429 without it,
// X-RateLimit-Reset; a 401 is retried once with a different token of the
// TokenSource, not with the same one.
func TestAPIErrors(t *testing.T) {
	var calls int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		switch r.URL.Path {
		case "/v1/limited":
			w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(5*time.Second).Unix()+1, 10))
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":{"code":"rate_limited","message":"slow down","retryable":true}}`))
		case "/v1/busy":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/v1/auth":
			if r.Header.Get("Authorization") != "Bearer good" {
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"error":{"code":"unauthorized","message":"expired","retryable":false}}`))
				return
			}
			_, _ = w.Write([]byte(`{}`))
		}
	}))
	defer srv.Close()
	base, err := parseBaseURL(srv.URL)
	require.NoError(t, err)
	ctx := context.Background()
	tokens := []string{"old", "good"}
	a := &api{base: base, hc: srv.Client(), timeout: 5 * time.Second, refresh: true,
		token: func(context.Context) (string, error) {
			tok := tokens[0]
			if len(tokens) > 1 {
				tokens = tokens[1:]
			}
			return tok, nil
		}}

	_, _, err = a.do(ctx, http.MethodGet, "/v1/limited", nil, nil, nil, nil, 0)
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, CodeRateLimited, ae.Code)
	require.Equal(t, "slow down", ae.Message)
	require.True(t, ae.Temporary())
	require.Greater(t, ae.RetryAfter, 3*time.Second)

	_, _, err = a.do(ctx, http.MethodGet, "/v1/busy", nil, nil, nil, nil, 0)
	require.ErrorAs(t, err, &ae)
	require.Equal(t, 7*time.Second, ae.RetryAfter)

	tokens = []string{"old", "good"}
	calls = 0
	status, _, err := a.do(ctx, http.MethodGet, "/v1/auth", nil, nil, nil, &struct{}{}, 0)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, 2, calls)

	tokens = []string{"bad"}
	calls = 0
	_, _, err = a.do(ctx, http.MethodGet, "/v1/auth", nil, nil, nil, nil, 0)
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusUnauthorized, ae.Status)
	require.Equal(t, 1, calls, "the same token is not tried twice")
	require.NotNil(t, permanent(err))
}
