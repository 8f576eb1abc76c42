package gateway

import (
	"flag"
	"slices"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/protocol"
)

var typingFigures = flag.Int("typingfigures", 0, "measure typing frame -> other member's receipt across two gateways, this many samples (0: skip)")

// TestTypingFigures measures the time from a typing frame written on
// gateway A to the frame read by a member connected to gateway B (p50,
// p99), everything (PostgreSQL, both gateways, both clients) on one
// machine:
//
//	go test ./gateway/ -run TestTypingFigures -typingfigures 500 -v
func TestTypingFigures(t *testing.T) {
	if *typingFigures <= 0 {
		t.Skip("measure with -typingfigures N")
	}
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	opts := ephemeralOpts()
	opts.tweak = func(c *Config) {
		// No rate limit between the samples.
		c.Ephemeral = EphemeralConfig{TypingInterval: time.Nanosecond, PresenceGrace: testGrace, PresenceExpiry: testExpiry}
	}
	a, b := newWSGatewayOn(t, env, opts), newWSGatewayOn(t, env, opts)
	u1 := a.user(t, 1)
	conv := u1.create(t, "figures", 2)
	c2 := dialWS(t, b, b.user(t, 2))
	c2.hello(t, 0, nil)
	c1 := dialWS(t, a, u1)
	c1.hello(t, 0, nil)
	time.Sleep(200 * time.Millisecond) // presence and catch-up frames pass
	lat := make([]time.Duration, 0, *typingFigures)
	for i := 0; i < *typingFigures; i++ {
		start := time.Now()
		c1.writeJSON(t, protocol.Typing{Type: protocol.FrameTyping, ConversationID: conv})
		for {
			f := c2.next(t)
			if f.Type == protocol.FrameTyping && f.UserID == 1 {
				break
			}
		}
		lat = append(lat, time.Since(start))
		time.Sleep(2 * time.Millisecond)
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
	t.Logf("typing frame -> other member across two gateways, %d samples: p50 %v, p90 %v, p99 %v, max %v",
		len(lat), q(0.5), q(0.9), q(0.99), lat[len(lat)-1])
}
