package ratelimit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// TestLimitersSweep: idle buckets are dropped once full again, so memory
// follows the active users, not all users ever seen.
func TestLimitersSweep(t *testing.T) {
	l := New(rate.Limit(10), 5)
	now := time.Now()
	for u := int64(0); u < 100000; u++ {
		require.True(t, l.Take(u, now).allowed)
	}
	later := now.Add(time.Second) // 5 tokens at 10/s: full after 0.5s
	for u := int64(100000); u < 100000+limiterShards*2048; u++ {
		l.Take(u, later)
	}
	total := 0
	for i := range l.shards {
		total += len(l.shards[i].m)
	}
	require.Less(t, total, 100000)
	st := l.Take(7, later)
	require.True(t, st.allowed)
	require.Equal(t, 4, st.remaining)
}
