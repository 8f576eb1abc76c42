package bench

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPaceKeepsItsSchedule(t *testing.T) {
	var got []int
	start := time.Now()
	// 1,000/s for 30 ms: ticks 0..29, whatever the machine's timing.
	pace(context.Background(), start, start.Add(30*time.Millisecond), 1000, func(i int) { got = append(got, i) })
	require.Len(t, got, 30)
	for i, v := range got {
		require.Equal(t, i, v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n := 0
	pace(ctx, start, start.Add(time.Hour), 1000, func(int) { n++ })
	require.Zero(t, n, "an ended context offers nothing")
}

func TestOfferLoadCountsTheAnswers(t *testing.T) {
	codes := []int{http.StatusCreated, http.StatusOK, http.StatusAccepted, http.StatusInternalServerError, 0}
	o := offerLoad(context.Background(), 1000, 0.02, newInflightCap(100), func(i int) answer {
		a := answer{Code: codes[i%len(codes)], Ms: 1, Pushes: 3}
		if a.Code == 0 {
			a.Err = errors.New("refused")
		}
		return a
	})
	require.EqualValues(t, 20, o.Sent)
	require.EqualValues(t, 8, o.Applied)
	require.EqualValues(t, 4, o.Pending)
	require.EqualValues(t, 8, o.Errors)
	require.Zero(t, o.Dropped)
	require.EqualValues(t, 3*12, o.Pushes, "only accepted requests cause pushes")
	require.Len(t, o.RoundTrips, 12)
	require.Contains(t, []string{"HTTP 500", "refused"}, o.FirstErr)

	o = offerLoad(context.Background(), 1000, 0.01, newInflightCap(0), func(int) answer {
		t.Error("a request past the cap was sent")
		return answer{}
	})
	require.EqualValues(t, 10, o.Dropped)
	require.Zero(t, o.Sent)
}

func TestBenchBodyRoundTrip(t *testing.T) {
	t0 := time.Unix(0, 1_700_000_000_123_456_789)
	p, ns, ok := parseBenchBody(benchBody(7, t0))
	require.True(t, ok)
	require.Equal(t, 7, p)
	require.Equal(t, t0.UnixNano(), ns)
	for _, bad := range []string{"", "hello", "bench:", "bench:x:1", "bench:1:y", "bench:1"} {
		_, _, ok := parseBenchBody(bad)
		require.False(t, ok, bad)
	}
}
