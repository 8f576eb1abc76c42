package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// TestRateLimitAcrossGateways: a user sending as fast as it can through
// two gateways at once gets one bucket's worth through in all when the
// gateways share what they spent, and about twice that when each counts
// alone (the case the sharing exists for).
func TestRateLimitAcrossGateways(t *testing.T) {
	const perSecond, burst = 5, 5
	run := func(t *testing.T, share time.Duration) (accepted int64, elapsed time.Duration) {
		tweak := func(c *Config) {
			c.SendRate, c.SendBurst, c.RateShareInterval = rate.Limit(perSecond), burst, share
		}
		tg := newGateway(t, tweak)
		g2, err := NewOn(wsTestConfig(tg.env, tweak), placementOf(tg.env), tg.env.Producer)
		require.NoError(t, err)
		startListen(t, g2)
		srv2 := httptest.NewServer(g2.Handler())
		t.Cleanup(func() {
			g2.Drain()
			srv2.Close()
		})
		tg2 := &tgw{env: tg.env, g: g2, srv: srv2, url: srv2.URL, hc: tg.hc}
		// The conversation is made by another user: the sender's bucket
		// is full when the run starts.
		cid := tg.user(t, 2).create(t, "fast", 1)
		senders := []*user{tg.user(t, 1), {tg: tg2, id: 1, token: tg.user(t, 1).token}}
		const window = 3 * time.Second
		start := time.Now()
		var wg sync.WaitGroup
		var ok, refused atomic.Int64
		for i := range 4 {
			wg.Go(func() {
				for j := 0; time.Since(start) < window; j++ {
					u := senders[(i+j)%2]
					r, err := u.doE("POST", fmt.Sprintf("/v1/conversations/%d/messages", cid),
						map[string]any{"msg_id": uuid.NewString(), "body": "x"})
					if err != nil {
						continue
					}
					switch r.status {
					case http.StatusCreated, http.StatusAccepted:
						ok.Add(1)
					case http.StatusTooManyRequests:
						refused.Add(1)
						time.Sleep(time.Millisecond)
					}
				}
			})
		}
		wg.Wait()
		elapsed = time.Since(start)
		t.Logf("share %v: %d sends through, %d refused in %v", share, ok.Load(), refused.Load(), elapsed.Round(time.Millisecond))
		require.Positive(t, refused.Load(), "the sender outran its rate")
		return ok.Load(), elapsed
	}
	// What one bucket lets through over the run, with a burst of slack for
	// what was spent in the last interval and not heard yet.
	bound := func(elapsed time.Duration) int64 {
		return int64(2*burst + perSecond*elapsed.Seconds())
	}
	t.Run("shared", func(t *testing.T) {
		got, elapsed := run(t, 50*time.Millisecond)
		require.LessOrEqual(t, got, bound(elapsed), "one bucket across both gateways")
	})
	t.Run("alone", func(t *testing.T) {
		got, elapsed := run(t, -1)
		require.Greater(t, got, bound(elapsed), "each gateway its own bucket: the check above can fail")
	})
}
