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

// TestSharedSpending: two gateways' buckets of one user, each told what
// the other spent, keep the user to one bucket's rate: the burst spent on
// both at once is a debt both pay back before either lets more through.
func TestSharedSpending(t *testing.T) {
	a, b := New(rate.Limit(1), 3), New(rate.Limit(1), 3)
	a.ShareSpending()
	b.ShareSpending()
	now := time.Now()
	for range 3 {
		require.True(t, a.Take(7, now).allowed)
		require.True(t, b.Take(7, now).allowed)
	}
	require.False(t, a.Take(7, now).allowed)
	sa, sb := a.Share(), b.Share()
	require.Equal(t, map[int64]int{7: 3}, sa, "a refused take is not spent")
	require.Nil(t, a.Share(), "counted once")
	b.Spent(7, sa[7], now)
	a.Spent(7, sb[7], now)
	// Both at -3: three seconds pay the debt back, the fourth gives one.
	for _, l := range []*Limiters{a, b} {
		require.False(t, l.Take(7, now.Add(3500*time.Millisecond)).allowed)
		require.True(t, l.Take(7, now.Add(4500*time.Millisecond)).allowed)
	}
	// Without sharing, nothing is counted.
	c := New(rate.Limit(1), 3)
	c.Take(7, now)
	require.Nil(t, c.Share())
	// More than a burst at once is taken whole: a full bucket of 3 owes 4.
	d := New(rate.Limit(1), 3)
	d.Spent(8, 7, now)
	require.False(t, d.Take(8, now.Add(4500*time.Millisecond)).allowed)
	require.True(t, d.Take(8, now.Add(5500*time.Millisecond)).allowed)
}
