package bench

import (
	"math"
	"slices"
)

// Dist summarises a latency distribution in milliseconds.
type Dist struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
	// CDF holds the latency at the quantiles of cdfQuantiles, for charts.
	CDF []float64 `json:"cdf_ms,omitempty"`
}

// cdfQuantiles are the quantiles a Dist keeps for the charts: dense in the
// tail, where latency distributions are interesting.
var cdfQuantiles = func() []float64 {
	var q []float64
	for i := 0; i <= 90; i += 2 {
		q = append(q, float64(i)/100)
	}
	for i := 91; i <= 99; i++ {
		q = append(q, float64(i)/100)
	}
	return append(q, 0.995, 0.999, 1)
}()

// newDist summarises samples (milliseconds); it sorts them in place.
func newDist(samples []float64) Dist {
	d := Dist{N: len(samples)}
	if len(samples) == 0 {
		return d
	}
	slices.Sort(samples)
	d.P50 = quantile(samples, 0.50)
	d.P90 = quantile(samples, 0.90)
	d.P99 = quantile(samples, 0.99)
	d.Max = samples[len(samples)-1]
	for _, q := range cdfQuantiles {
		d.CDF = append(d.CDF, quantile(samples, q))
	}
	return d
}

// quantile of sorted samples, nearest rank.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// f32to64 widens samples kept as float32 to save memory.
func f32to64(in []float32) []float64 {
	out := make([]float64, len(in))
	for i, v := range in {
		out[i] = float64(v)
	}
	return out
}
