package gateway

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// TestStartupAdmission: a starting gateway admits a crowd at its rate and
// gives every other client a slot of its own to come back on, as 503 with
// Retry-After and retry_after_ms (HTTP catch-up syncs) or an error frame
// and close 1013 (WebSocket); coming back on its slot, each client is
// admitted the first time. Held long-polls are not sessions' first
// requests and are never refused.
func TestStartupAdmission(t *testing.T) {
	const rate, crowd = 20, 40
	w := newWSGateway(t, func(c *Config) {
		c.Reconnect = ReconnectConfig{AdmitRate: rate, AdmitBurst: 2}
	}, WSConfig{})
	users := make([]*user, crowd)
	for i := range users {
		users[i] = w.user(t, int64(500+i))
	}
	first := crowdSync(users)
	var admitted int
	var waits []time.Duration
	for i, a := range first {
		switch a.status {
		case http.StatusOK:
			admitted++
		case http.StatusServiceUnavailable:
			require.Positive(t, a.wait, "client %d: retry_after_ms", i)
			require.NotEmpty(t, a.header, "client %d: Retry-After", i)
			waits = append(waits, a.wait)
		default:
			t.Fatalf("client %d: status %d", i, a.status)
		}
	}
	require.Less(t, admitted, crowd/2, "the crowd is not admitted at once")
	slices.Sort(waits)
	for i := 1; i < len(waits); i++ {
		require.Greater(t, waits[i], waits[i-1], "every refused client has a slot of its own")
	}
	// The last slot is where the rate puts it.
	require.InDelta(t, float64(time.Duration(len(waits))*time.Second/rate), float64(waits[len(waits)-1]), float64(300*time.Millisecond))

	// Held long-polls go through, admission or not.
	r := users[0].do(t, "GET", "/v1/sync?wait=1", nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	// And carry the crash hint for long-polling clients.
	var ans protocol.SyncAnswer
	r.decode(t, &ans)
	require.NotNil(t, ans.Polling)
	require.NotNil(t, ans.Polling.Reconnect)

	// Every refused client comes back on its slot: admitted at once.
	refused, back := comeBack(users, first)
	require.Equal(t, crowd, back, "clients admitted on their slot (%d were refused)", refused)
	decided := w.g.reconnects.decided
	require.Equal(t, float64(refused), counterValue(decided.WithLabelValues("refused")))
	require.Equal(t, float64(refused), counterValue(decided.WithLabelValues("claimed")))

	// WebSockets opened at once are refused the same way once the burst is
	// spent: an error frame with retry_after_ms, then 1013.
	for i := 0; ; i++ {
		require.Less(t, i, 10, "no WebSocket refused")
		c := dialWS(t, w, w.user(t, int64(900+i)))
		c.hello(t, 0, nil)
		f, err := c.nextE(30 * time.Second)
		if err == nil && f.Type == protocol.FrameWelcome {
			continue // admitted within the burst
		}
		code, frames := c.closeCode(t)
		if err == nil {
			frames = append([]protocol.ServerFrame{f}, frames...)
		}
		require.Equal(t, protocol.CloseTryAgainLater, code)
		require.Len(t, frames, 1)
		require.Equal(t, protocol.CodeUnavailable, frames[0].Code)
		require.Positive(t, frames[0].RetryAfterMS)
		break
	}
}

// TestDrainHints: a drain closes every WebSocket with an error frame whose
// retry_after_ms spreads the sessions over RestartDelay plus the time
// they take to be admitted, then 1012; the welcome carried the hint for a
// crash. Without hints, a bare 1012 and no hint, as before.
func TestDrainHints(t *testing.T) {
	for _, hints := range []bool{true, false} {
		t.Run(map[bool]string{true: "hints", false: "no hints"}[hints], func(t *testing.T) {
			const rate, n = 10, 12
			delay := 2 * time.Second
			w := newWSGateway(t, func(c *Config) {
				c.Reconnect = ReconnectConfig{AdmitRate: rate, AdmitBurst: 100, RestartDelay: delay, Disabled: !hints}
			}, WSConfig{HeartbeatInterval: 300 * time.Millisecond})
			clients := make([]*wsClient, n)
			for i := range clients {
				clients[i] = dialWS(t, w, w.user(t, int64(100+i)))
				clients[i].hello(t, 0, nil)
				wel := clients[i].next(t)
				require.Equal(t, protocol.FrameWelcome, wel.Type)
				if !hints {
					require.Nil(t, wel.Reconnect)
					continue
				}
				require.NotNil(t, wel.Reconnect)
				require.Equal(t, delay.Milliseconds(), wel.Reconnect.AfterMS)
				require.Equal(t, int64(i+1)*1000/rate*5/4, wel.Reconnect.WindowMS, "the window of the sessions then")
			}
			// Heartbeats refresh the hint: the window of every session now.
			// One sent before the last session was admitted (a slow
			// machine takes longer than an interval to dial them all)
			// still counts fewer, and grows to all of them.
			hb := clients[0].next(t)
			for i := 0; hb.Type != protocol.FrameHeartbeat ||
				(hints && hb.Reconnect != nil && hb.Reconnect.WindowMS < int64(n)*1000/rate*5/4 && i < 20); i++ {
				hb = clients[0].next(t)
			}
			if hints {
				require.NotNil(t, hb.Reconnect)
				require.Equal(t, int64(n)*1000/rate*5/4, hb.Reconnect.WindowMS)
			} else {
				require.Nil(t, hb.Reconnect)
			}
			w.g.Drain()
			var waits []int64
			for i, c := range clients {
				code, frames := c.closeCode(t)
				require.Equal(t, protocol.CloseServiceRestart, code, "client %d", i)
				var errs []protocol.ServerFrame
				for _, f := range frames {
					if f.Type == protocol.FrameError {
						errs = append(errs, f)
					}
				}
				if !hints {
					require.Empty(t, errs)
					continue
				}
				require.Len(t, errs, 1)
				require.Equal(t, protocol.CodeUnavailable, errs[0].Code)
				require.True(t, errs[0].Retryable)
				waits = append(waits, errs[0].RetryAfterMS)
			}
			if !hints {
				return
			}
			slices.Sort(waits)
			slot := int64(1000 / rate)
			for i, ms := range waits {
				lo := delay.Milliseconds() + int64(i)*slot
				require.True(t, ms >= lo && ms <= lo+slot, "session %d told %d ms, not in its slot [%d, %d]", i, ms, lo, lo+slot)
			}
		})
	}
}

// syncAnswer is how a catch-up sync was answered: status, the body's
// retry_after_ms and the Retry-After header.
type syncAnswer struct {
	status int
	wait   time.Duration
	header string
}

// crowdSync sends one catch-up sync (no wait) per user, all at once.
func crowdSync(users []*user) []syncAnswer {
	first := make([]syncAnswer, len(users))
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := u.doE("GET", "/v1/sync", nil)
			if err != nil {
				first[i].status = -1
				return
			}
			first[i] = syncAnswer{status: r.status, header: r.header.Get("Retry-After")}
			if r.status == http.StatusServiceUnavailable {
				var e protocol.ErrorBody
				if decodeInto(r.body, &e) == nil {
					first[i].wait = time.Duration(e.Error.RetryAfterMS) * time.Millisecond
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// comeBack sends each refused user's sync again after its retry_after_ms
// and returns how many were refused and how many are admitted in all.
func comeBack(users []*user, first []syncAnswer) (refused, admitted int) {
	var wg sync.WaitGroup
	for i, a := range first {
		if a.status != http.StatusServiceUnavailable {
			continue
		}
		refused++
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(a.wait)
			r, err := users[i].doE("GET", "/v1/sync", nil)
			if err == nil {
				first[i].status = r.status
			}
		}()
	}
	wg.Wait()
	for _, a := range first {
		if a.status == http.StatusOK {
			admitted++
		}
	}
	return refused, admitted
}
