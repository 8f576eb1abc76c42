package inbox

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestMsgCacheBudget(t *testing.T) {
	var hits, misses int
	const budget = 1 << 20 // 16 KiB a shard, a conversation is 12 KiB
	c := newMsgCache(budget, func() { hits++ }, func() { misses++ })
	body := bytes.Repeat([]byte("x"), 200)
	// 400 conversations of 50 messages (4.8 MB), in conversation order.
	for i := range 20000 {
		c.put(msgKey{epoch: 1, conv: int64(i / 50), seq: int64(i%50 + 1)}, 1, body)
	}
	total := 0
	for i := range c.shards {
		total += c.shards[i].bytes
	}
	require.LessOrEqual(t, total, budget+msgCacheShards*(len(body)+msgOverhead), "within the budget")
	require.Greater(t, c.len(), 500)
	b, ok := c.get(msgKey{epoch: 1, conv: 399, seq: 50}, 0)
	require.True(t, ok, "the newest stays")
	require.Equal(t, body, b)
	_, ok = c.get(msgKey{epoch: 2, conv: 399, seq: 50}, 0)
	require.False(t, ok, "another epoch is another message")
	gone := 0
	for conv := range 20 {
		if _, ok := c.get(msgKey{epoch: 1, conv: int64(conv), seq: 1}, 0); !ok {
			gone++
		}
	}
	require.Greater(t, gone, 10, "most of the oldest conversations went")
	require.Equal(t, 1+20-gone, hits)
	require.Equal(t, 1+gone, misses)

	// Windows: a message far from a conversation's window starts a new one;
	// one just below it extends it.
	w := newMsgCache(1<<20, func() {}, func() {})
	w.put(msgKey{1, 7, 100}, 1, body)
	w.put(msgKey{1, 7, 90}, 1, body)
	_, ok = w.get(msgKey{1, 7, 100}, 0)
	require.True(t, ok)
	_, ok = w.get(msgKey{1, 7, 95}, 0)
	require.False(t, ok)
	w.put(msgKey{1, 7, 100 + maxWindow + 5}, 1, body)
	_, ok = w.get(msgKey{1, 7, 100 + maxWindow + 5}, 0)
	require.True(t, ok)
	_, ok = w.get(msgKey{1, 7, 100}, 0)
	require.False(t, ok, "the old window was dropped")
	require.Equal(t, 1, w.len())

	var off *msgCache
	off.put(msgKey{}, 1, body)
	_, ok = off.get(msgKey{}, 0)
	require.False(t, ok)
}

func TestRawIntArray(t *testing.T) {
	bin := pgconn.FieldDescription{Name: "a", Format: pgx.BinaryFormatCode}
	txt := pgconn.FieldDescription{Name: "a", Format: pgx.TextFormatCode}
	enc := func(size int, vals ...int64) []byte {
		b := binary.BigEndian.AppendUint32(nil, 1)
		b = binary.BigEndian.AppendUint32(b, 0)
		b = binary.BigEndian.AppendUint32(b, 20)
		b = binary.BigEndian.AppendUint32(b, uint32(len(vals)))
		b = binary.BigEndian.AppendUint32(b, 1)
		for _, v := range vals {
			b = binary.BigEndian.AppendUint32(b, uint32(size))
			switch size {
			case 2:
				b = binary.BigEndian.AppendUint16(b, uint16(v))
			case 8:
				b = binary.BigEndian.AppendUint64(b, uint64(v))
			}
		}
		return b
	}
	got, err := rawIntArray(bin, enc(8, 1, -2, 1<<40), nil)
	require.NoError(t, err)
	require.Equal(t, []int64{1, -2, 1 << 40}, got)
	got, err = rawIntArray(bin, enc(2, 1, 2), nil)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2}, got)
	got, err = rawIntArray(bin, nil, nil)
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = rawIntArray(txt, []byte("{3,-4,5}"), nil)
	require.NoError(t, err)
	require.Equal(t, []int64{3, -4, 5}, got)
	_, err = rawIntArray(bin, enc(8, 1, 2)[:30], nil)
	require.Error(t, err)
	null := enc(8, 1)
	binary.BigEndian.PutUint32(null[20:], 0xFFFFFFFF)
	_, err = rawIntArray(bin, null, nil)
	require.Error(t, err)

	cols := [5][]int64{{3, 1, 2}, {30, 10, 20}, {1, 2, 1}, {300, 100, 200}, {0, 0, 7}}
	sortColumns(&cols)
	require.Equal(t, [5][]int64{{1, 2, 3}, {10, 20, 30}, {2, 1, 1}, {100, 200, 300}, {0, 7, 0}}, cols)
}

// A changed message is forgotten, and a read that was in flight during the
// change cannot put its older copy back; a newer copy is cached again.
func TestMsgCacheForget(t *testing.T) {
	c := newMsgCache(1<<20, func() {}, func() {})
	k := msgKey{epoch: 1, conv: 7, seq: 3}
	c.put(k, 1, []byte("v1"))
	b, ok := c.get(k, 0)
	require.True(t, ok)
	require.Equal(t, "v1", string(b))

	c.forget(7, 3, 2)
	_, ok = c.get(k, 0)
	require.False(t, ok, "forgotten at once")
	c.put(k, 1, []byte("v1"))
	_, ok = c.get(k, 0)
	require.False(t, ok, "an older copy read before the change is not cached again")
	c.put(k, 2, []byte("v2"))
	b, ok = c.get(k, 0)
	require.True(t, ok)
	require.Equal(t, "v2", string(b))
	c.put(k, 1, []byte("v1"))
	b, _ = c.get(k, 0)
	require.Equal(t, "v2", string(b), "a newer copy is never replaced by an older one")

	c.clear()
	_, ok = c.get(k, 0)
	require.False(t, ok, "clear drops everything")
}

// An update entry is never answered with a copy older than its change, even
// before the change's notification made the cache forget it.
func TestMsgCacheMinVersion(t *testing.T) {
	c := newMsgCache(1<<20, func() {}, func() {})
	k := msgKey{epoch: 1, conv: 7, seq: 3}
	c.put(k, 2, []byte("v2"))
	_, ok := c.get(k, 3)
	require.False(t, ok, "an update to version 3 misses a version-2 copy")
	b, ok := c.get(k, 2)
	require.True(t, ok)
	require.Equal(t, "v2", string(b))
	_, ok = c.get(k, 0)
	require.True(t, ok, "a message entry takes any copy")
}
