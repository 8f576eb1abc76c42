package gateway

import (
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/protocol"
)

// BenchmarkTypingTwoGateways measures the time from a typing frame
// written on gateway A to the frame read by a member connected to
// gateway B, 1,000 frames an iteration, everything (PostgreSQL, both
// gateways, both clients) on one machine (docs/benchmarks.md has the
// command).
func BenchmarkTypingTwoGateways(b *testing.B) {
	var lat []float64
	for range b.N {
		lat = append(lat, typingLatency(b, 1000)...)
	}
	b.ReportMetric(0, "ns/op")
	reportQuantiles(b, "typing", lat)
}

// typingLatency returns n typing frame latencies (ms) from a member on
// one gateway to another member on a second one.
func typingLatency(b *testing.B, n int) []float64 {
	env := testenv.New(b, testenv.Options{})
	env.StartFanout(b)
	opts := ephemeralOpts()
	opts.tweak = func(c *Config) {
		// No rate limit between the samples.
		c.Ephemeral = EphemeralConfig{TypingInterval: time.Nanosecond, PresenceGrace: testGrace, PresenceExpiry: testExpiry}
	}
	ga, gb := newWSGatewayOn(b, env, opts), newWSGatewayOn(b, env, opts)
	u1 := ga.user(b, 1)
	conv := u1.create(b, "figures", 2)
	c2 := dialWS(b, gb, gb.user(b, 2))
	c2.hello(b, 0, nil)
	c1 := dialWS(b, ga, u1)
	c1.hello(b, 0, nil)
	time.Sleep(200 * time.Millisecond) // presence and catch-up frames pass
	lat := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		c1.writeJSON(b, protocol.Typing{Type: protocol.FrameTyping, ConversationID: conv})
		for {
			f := c2.next(b)
			if f.Type == protocol.FrameTyping && f.UserID == 1 {
				break
			}
		}
		lat = append(lat, float64(time.Since(start).Microseconds())/1000)
		time.Sleep(2 * time.Millisecond)
	}
	return lat
}
