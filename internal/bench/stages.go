package bench

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// Where a send's time goes, from the histograms the product itself keeps:
// the gateway's inboxd_gateway_send_stage_seconds (check, append,
// projection; read from the gateway child over its control port) and the
// fanout's inboxd_fanout_record_latency_seconds (queued, committed; in
// this process). A phase takes the difference of the histograms before and
// after it, and each stage's p50 and p99 are interpolated within buckets.

// The histograms of the stages.
const (
	sendStageMetric     = "inboxd_gateway_send_stage_seconds"
	fanoutLatencyMetric = "inboxd_fanout_record_latency_seconds"
)

// histSnap is one histogram: upper bounds and cumulative counts.
type histSnap struct {
	Bounds []float64 `json:"bounds"`
	Counts []uint64  `json:"counts"`
	Total  uint64    `json:"total"`
}

// gatherHists returns the histogram metric name of g by the value of its
// one label.
func gatherHists(g prometheus.Gatherer, name string) map[string]histSnap {
	out := map[string]histSnap{}
	mfs, err := g.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			label := ""
			if len(m.GetLabel()) > 0 {
				label = m.GetLabel()[0].GetValue()
			}
			h := m.GetHistogram()
			var s histSnap
			for _, b := range h.GetBucket() {
				s.Bounds = append(s.Bounds, b.GetUpperBound())
				s.Counts = append(s.Counts, b.GetCumulativeCount())
			}
			s.Total = h.GetSampleCount()
			out[label] = s
		}
	}
	return out
}

// gatewayHists reads a histogram of the gateway child (GET /ctl/hist).
func gatewayHists(ctx context.Context, ctl, name string) map[string]histSnap {
	var h map[string]histSnap
	if err := ctlGet(ctx, ctl, "/ctl/hist?name="+url.QueryEscape(name), &h); err != nil {
		return nil
	}
	return h
}

// StageLatency is one stage of a send over a phase.
type StageLatency struct {
	Stage string  `json:"stage"`
	N     uint64  `json:"n"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
}

// stageDeltas turns two snapshots into each stage's quantiles over the
// phase between them, in the order of names.
func stageDeltas(before, after map[string]histSnap, prefix string, names ...string) []StageLatency {
	var out []StageLatency
	for _, n := range names {
		a, ok := after[n]
		if !ok {
			continue
		}
		b := before[n]
		d := histSnap{Bounds: a.Bounds, Counts: make([]uint64, len(a.Counts)), Total: a.Total - b.Total}
		for i := range a.Counts {
			d.Counts[i] = a.Counts[i]
			if i < len(b.Counts) {
				d.Counts[i] -= b.Counts[i]
			}
		}
		if d.Total == 0 {
			continue
		}
		out = append(out, StageLatency{Stage: prefix + n, N: d.Total, P50: d.quantile(0.5) * 1000, P99: d.quantile(0.99) * 1000})
	}
	return out
}

// quantile interpolates the q-quantile within its bucket (the last finite
// bound for the overflow bucket).
func (h histSnap) quantile(q float64) float64 {
	rank := q * float64(h.Total)
	i := sort.Search(len(h.Counts), func(i int) bool { return float64(h.Counts[i]) >= rank })
	if i >= len(h.Counts) {
		if len(h.Bounds) == 0 {
			return math.NaN()
		}
		return h.Bounds[len(h.Bounds)-1]
	}
	lo, below := 0.0, uint64(0)
	if i > 0 {
		lo, below = h.Bounds[i-1], h.Counts[i-1]
	}
	in := h.Counts[i] - below
	if in == 0 {
		return h.Bounds[i]
	}
	return lo + (h.Bounds[i]-lo)*(rank-float64(below))/float64(in)
}

// stagesText is the stages for a progress line.
func stagesText(st []StageLatency) string {
	s := ""
	for i, x := range st {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s p50 %s p99 %s", x.Stage, ms(x.P50), ms(x.P99))
	}
	return s
}

// stagesRow is where the sends of phase p went, next to its push latency.
func stagesRow(transport string, p E2EPhase) (Row, bool) {
	if len(p.Stages) == 0 {
		return Row{}, false
	}
	var projection float64
	for _, x := range p.Stages {
		if x.Stage == "gateway projection" {
			projection = x.P50
		}
	}
	return Row{
		Figure: fmt.Sprintf("where a send's time goes at %s msg/s, %s sends (the gateway's and the fanout's own histograms: %s, %s), p50 / p99",
			num(p.Offered), transport, sendStageMetric, fanoutLatencyMetric),
		Value:     stagesText(p.Stages),
		Reference: fmt.Sprintf("send -> push, same phase: %s / %s", ms(p.Push.P50), ms(p.Push.P99)),
		Ratio:     "projection p50 / push p50 " + ratio(projection, p.Push.P50),
	}, true
}
