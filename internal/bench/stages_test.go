package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStageQuantiles: the phase's histogram is the difference of two
// snapshots, and its quantiles are interpolated within their bucket.
func TestStageQuantiles(t *testing.T) {
	bounds := []float64{0.001, 0.002, 0.005}
	before := map[string]histSnap{"check": {Bounds: bounds, Counts: []uint64{10, 10, 10}, Total: 10}}
	// The phase adds 100 observations: 50 in (1, 2] ms, 50 in (2, 5] ms.
	after := map[string]histSnap{"check": {Bounds: bounds, Counts: []uint64{10, 60, 110}, Total: 110},
		"idle": {Bounds: bounds, Counts: []uint64{0, 0, 0}, Total: 0}}
	st := stageDeltas(before, after, "gateway ", "check", "idle", "absent")
	require.Len(t, st, 1, "a stage with no observation in the phase, or none at all, is left out")
	require.Equal(t, "gateway check", st[0].Stage)
	require.Equal(t, uint64(100), st[0].N)
	require.InDelta(t, 2.0, st[0].P50, 1e-9)  // the 50th of 100 ends the (1, 2] bucket
	require.InDelta(t, 4.94, st[0].P99, 1e-9) // 49 of 50 into (2, 5]
}
