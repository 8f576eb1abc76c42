package bench

import (
	"math"
)

// logHist is a latency histogram in milliseconds with buckets 1% wide,
// from 10 µs up: the load generators of the large figure keep millions of
// pushes each and send the orchestrator their histograms, which add up
// (raw samples would not fit the line protocol).
type logHist struct {
	Counts []int64 `json:"counts"` // by bucket
	N      int64   `json:"n"`
	Max    float64 `json:"max_ms"`
}

const (
	histMin    = 0.01 // ms: the lower edge of bucket 0
	histGrowth = 1.01
)

var histLogGrowth = math.Log(histGrowth)

func newLogHist() *logHist { return &logHist{} }

func (h *logHist) add(ms float64) {
	b := 0
	if ms > histMin {
		b = int(math.Log(ms/histMin) / histLogGrowth)
	}
	if b >= len(h.Counts) {
		h.Counts = append(h.Counts, make([]int64, b+1-len(h.Counts))...)
	}
	h.Counts[b]++
	h.N++
	h.Max = max(h.Max, ms)
}

func (h *logHist) merge(o *logHist) {
	if o == nil {
		return
	}
	if len(o.Counts) > len(h.Counts) {
		h.Counts = append(h.Counts, make([]int64, len(o.Counts)-len(h.Counts))...)
	}
	for b, c := range o.Counts {
		h.Counts[b] += c
	}
	h.N += o.N
	h.Max = max(h.Max, o.Max)
}

// quantile is the upper edge of the bucket holding the q-quantile (within
// 1% of it), capped at the exact maximum.
func (h *logHist) quantile(q float64) float64 {
	if h.N == 0 {
		return math.NaN()
	}
	rank := int64(math.Ceil(q * float64(h.N)))
	rank = max(1, min(rank, h.N))
	var seen int64
	for b, c := range h.Counts {
		seen += c
		if seen >= rank {
			return min(histMin*math.Pow(histGrowth, float64(b+1)), h.Max)
		}
	}
	return h.Max
}

// dist summarises h as a Dist (its percentiles within 1%).
func (h *logHist) dist() Dist {
	d := Dist{N: int(h.N)}
	if h.N == 0 {
		return d
	}
	d.P50, d.P90, d.P99, d.Max = h.quantile(0.5), h.quantile(0.9), h.quantile(0.99), h.Max
	for _, q := range cdfQuantiles {
		d.CDF = append(d.CDF, h.quantile(q))
	}
	return d
}
