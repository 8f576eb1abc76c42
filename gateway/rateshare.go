package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// Rate limits across gateways (docs/decisions.md, "Rate limits across
// gateways"): each gateway spends its users' send buckets locally, and
// every RateShareInterval tells the others, on a NOTIFY channel of the
// catalog server, how many tokens each user spent on it; each gateway
// takes those tokens from its own bucket of the user, into debt if need
// be. A user so keeps to one bucket's rate whichever gateways its
// requests reach: over any stretch longer than the interval, what all
// gateways let through is at most the rate's and one burst, give or take
// what was spent in the last interval.

// DefaultRateShareInterval is how often a gateway tells the others what
// its users spent.
const DefaultRateShareInterval = 100 * time.Millisecond

// rateChannel is the NOTIFY channel of the spending.
const rateChannel = "inboxd_rate"

// maxRatePayload keeps a notification under PostgreSQL's 8000 bytes.
const maxRatePayload = 7000

// newGatewayID is a process's id on the channel, to skip its own news.
func newGatewayID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// encodeSpending cuts spent into payloads "<id>|<user>:<n>,…" of at most
// maxRatePayload bytes.
func encodeSpending(id string, spent map[int64]int) []string {
	var out []string
	var b strings.Builder
	for u, n := range spent {
		item := strconv.FormatInt(u, 10) + ":" + strconv.Itoa(n)
		if b.Len() > 0 && b.Len()+1+len(item) > maxRatePayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() == 0 {
			b.WriteString(id)
			b.WriteByte('|')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(item)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// heardSpending applies another gateway's payload to the send buckets.
// It runs on the LISTEN goroutine: parsing and a lock per user, no I/O.
// A payload it cannot read is dropped (counted): only gateways write it.
func (g *Gateway) heardSpending(payload string) {
	from, list, ok := strings.Cut(payload, "|")
	if !ok {
		g.metrics.rateShared.WithLabelValues("dropped").Inc()
		return
	}
	if from == g.id {
		return
	}
	now := time.Now()
	total := 0
	for item := range strings.SplitSeq(list, ",") {
		us, ns, ok := strings.Cut(item, ":")
		u, err1 := strconv.ParseInt(us, 10, 64)
		n, err2 := strconv.Atoi(ns)
		if !ok || err1 != nil || err2 != nil || u <= 0 || n <= 0 {
			g.metrics.rateShared.WithLabelValues("dropped").Inc()
			return
		}
		g.sendLimits.Spent(u, n, now)
		total += n
	}
	g.metrics.rateShared.WithLabelValues("heard").Add(float64(total))
}

// runRateShare tells the other gateways what this one's users spent,
// every RateShareInterval, until ctx ends.
func (g *Gateway) runRateShare(ctx context.Context) error {
	if g.cfg.RateShareInterval < 0 {
		return nil
	}
	every(ctx, g.cfg.RateShareInterval, func() {
		spent := g.sendLimits.Share()
		if len(spent) == 0 {
			return
		}
		total := 0
		for _, n := range spent {
			total += n
		}
		for _, p := range encodeSpending(g.id, spent) {
			if _, err := g.srv.Catalog().Exec(ctx, `SELECT pg_notify($1, $2)`, rateChannel, p); err != nil {
				if ctx.Err() == nil {
					g.metrics.rateShared.WithLabelValues("unsent").Add(float64(total))
					g.log.Warn("telling the other gateways what users spent failed; they may let a user past its rate meanwhile", "err", err)
				}
				return
			}
		}
		g.metrics.rateShared.WithLabelValues("told").Add(float64(total))
	})
	return nil
}
