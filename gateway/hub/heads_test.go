package hub

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHeadCacheUnit pins the head cache's validity rules: nothing before
// the LISTEN connection is up, nothing learned from before an outage or
// from another epoch, heads never moved back.
func TestHeadCacheUnit(t *testing.T) {
	c := newHeadCache(1000)
	gen := c.Generation()
	c.Learn(gen, 1, 7, 10)
	_, _, ok := c.Get(1)
	require.False(t, ok, "not valid before the LISTEN connection is up")

	c.reset(true)
	gen = c.Generation()
	c.Learn(gen, 1, 7, 10)
	ep, h, ok := c.Get(1)
	require.True(t, ok)
	require.Equal(t, [2]int64{7, 10}, [2]int64{ep, h})
	c.notified(map[int64]int64{1: 12, 2: 5})
	_, h, _ = c.Get(1)
	require.EqualValues(t, 12, h)
	_, _, ok = c.Get(2)
	require.False(t, ok, "notifications do not add users")
	c.Learn(gen, 1, 7, 11) // an older read never moves a head back
	_, h, _ = c.Get(1)
	require.EqualValues(t, 12, h)

	stale := c.Generation()
	c.reset(false) // the connection dropped
	_, _, ok = c.Get(1)
	require.False(t, ok)
	c.reset(true)
	c.Learn(stale, 3, 7, 1) // a read from before the outage
	_, _, ok = c.Get(3)
	require.False(t, ok)

	gen = c.Generation()
	c.Learn(gen, 1, 7, 20)
	c.Learn(gen, 4, 8, 3) // the database moved to epoch 8: everything goes
	_, _, ok = c.Get(1)
	require.False(t, ok)

	// A replay's announcement resets through the hub.
	h2 := New(Config{WakeBurst: 1, HeadCacheUsers: 1000})
	h2.heads[0].reset(true)
	h2.heads[0].Learn(h2.heads[0].Generation(), 5, 9, 1)
	_, _, ok = h2.heads[0].Get(5)
	require.True(t, ok)
	h2.dispatch(0, "e10")
	_, _, ok = h2.heads[0].Get(5)
	require.False(t, ok)

	var nilCache *HeadCache
	nilCache.Learn(1, 1, 1, 1)
	nilCache.reset(true)
	_, _, ok = nilCache.Get(1)
	require.False(t, ok)
}
