package projector

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A batch that began before a clear (Forget) stores nothing: what it read
// may be what the clear was for; one that began after stores as usual.
func TestConversationCacheDropsUpdatesFromBeforeAClear(t *testing.T) {
	update := func(gen int64) *cacheUpdate {
		return &cacheUpdate{gen: gen, moved: map[int32][2]int64{0: {0, 5}},
			convs: map[int64]*cachedConv{1: {partition: 0, lastSeq: 4, joined: map[int64]int64{10: 1}}}}
	}
	cc := newConvCache(0)
	before := update(cc.generation())
	cc.clear()
	cc.store(before)
	require.Zero(t, cc.size(), "an update from before the clear")
	cc.store(update(cc.generation()))
	require.Equal(t, 1, cc.size())
	require.Empty(t, cc.lookup(map[int64]int32{1: -1}), "a conversation from several partitions")
}
