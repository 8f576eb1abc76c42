package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// TestRateLimits is acceptance 7: past a bucket the answer is 429 with
// Retry-After and the X-RateLimit-* headers; after Retry-After the next
// request succeeds. Sends and syncs have separate buckets per user.
func TestRateLimits(t *testing.T) {
	tg := newGateway(t, func(c *Config) {
		c.SendRate, c.SendBurst = 1, 3
		c.SyncRate, c.SyncBurst = 1, 2
	})
	a, b := tg.user(t, 1), tg.user(t, 2)
	cid := a.create(t, "limited", 2) // one send token spent

	sendOnce := func(u *user) resp {
		return u.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid),
			map[string]any{"msg_id": uuid.NewString(), "body": "x"})
	}
	r := sendOnce(a)
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	require.Equal(t, "3", r.header.Get("X-RateLimit-Limit"))
	require.Equal(t, "1", r.header.Get("X-RateLimit-Remaining"))
	reset, err := strconv.ParseInt(r.header.Get("X-RateLimit-Reset"), 10, 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, reset, time.Now().Unix())
	// Spend the rest (a slow machine may have earned a token meanwhile).
	for i := 0; i < 10 && r.status != http.StatusTooManyRequests; i++ {
		r = sendOnce(a)
	}
	requireError(t, r, http.StatusTooManyRequests, protocol.CodeRateLimited, "send past the burst")
	require.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
	require.Equal(t, "3", r.header.Get("X-RateLimit-Limit"))
	require.NotEmpty(t, r.header.Get("X-RateLimit-Reset"))
	var e protocol.ErrorBody
	r.decode(t, &e)
	require.True(t, e.Error.Retryable)
	retry, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err)
	require.Positive(t, retry)

	// Another user's bucket and the same user's sync bucket are untouched.
	require.Equal(t, http.StatusCreated, sendOnce(b).status)
	require.Equal(t, http.StatusOK, a.do(t, "GET", "/v1/sync", nil).status)

	// After Retry-After the next send goes through.
	time.Sleep(time.Duration(retry) * time.Second)
	require.Equal(t, http.StatusCreated, sendOnce(a).status)

	// Reads: burst 2, one spent above.
	r = a.do(t, "GET", "/v1/conversations", nil)
	for i := 0; i < 10 && r.status != http.StatusTooManyRequests; i++ {
		r = a.do(t, "GET", "/v1/sync", nil)
	}
	requireError(t, r, http.StatusTooManyRequests, protocol.CodeRateLimited, "read past the burst")
	retry, err = strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err)
	time.Sleep(time.Duration(retry) * time.Second)
	require.Equal(t, http.StatusOK, a.do(t, "GET", "/v1/sync", nil).status)
}
