package inbox

import "sync"

// msgKey identifies a message within one epoch (a replay may renumber).
type msgKey struct{ epoch, conv, seq int64 }

const msgCacheShards = 64

// msgCache holds the wire form of messages, bounded by bytes. It is kept
// per conversation: a conversation's messages are numbered densely, so they
// sit in a slice indexed by seq, and a lookup is one access to a small map
// of conversations plus an index (a map of every message was a memory miss
// or two per entry, 16% of the gateway's CPU on sync pages). When a shard
// is over its share of the budget it evicts whole conversations, the ones
// not read since the last eviction pass first (a clock). A nil *msgCache
// caches nothing.
type msgCache struct {
	shards      [msgCacheShards]msgShard
	shardBudget int
	hits        func()
	missesFn    func()
}

type msgShard struct {
	mu    sync.Mutex
	convs map[convKey]*convMsgs
	bytes int
}

type convKey struct{ epoch, conv int64 }

// convMsgs is a window of one conversation's messages: msgs[i] is seq
// base+i (nil when not cached).
type convMsgs struct {
	base  int64
	msgs  [][]byte
	bytes int  // the messages' bytes plus the slots
	hot   bool // read since the last eviction pass
}

// msgOverhead approximates the bytes a cached message costs beyond its JSON
// (its slot and allocation rounding).
const msgOverhead = 40

// maxWindow bounds a conversation's window of slots: a message further
// from the window than this starts a new one.
const maxWindow = 4096

func newMsgCache(budget int64, hit, miss func()) *msgCache {
	if budget <= 0 {
		return nil
	}
	c := &msgCache{shardBudget: int(max(budget/msgCacheShards, 1)), hits: hit, missesFn: miss}
	for i := range c.shards {
		c.shards[i].convs = map[convKey]*convMsgs{}
	}
	return c
}

func (c *msgCache) shard(conv int64) *msgShard {
	return &c.shards[(uint64(conv)*0x9E3779B97F4A7C15>>32)%msgCacheShards]
}

func (c *msgCache) get(k msgKey) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	sh := c.shard(k.conv)
	sh.mu.Lock()
	var b []byte
	if cm := sh.convs[convKey{k.epoch, k.conv}]; cm != nil {
		if i := k.seq - cm.base; i >= 0 && i < int64(len(cm.msgs)) {
			b = cm.msgs[i]
		}
		cm.hot = true
	}
	sh.mu.Unlock()
	if b != nil {
		c.hits()
		return b, true
	}
	c.missesFn()
	return nil, false
}

func (c *msgCache) put(k msgKey, b []byte) {
	if c == nil || b == nil {
		return
	}
	sh := c.shard(k.conv)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ck := convKey{k.epoch, k.conv}
	cm := sh.convs[ck]
	if cm == nil {
		cm = &convMsgs{base: k.seq}
		sh.convs[ck] = cm
	}
	i := k.seq - cm.base
	switch {
	case i >= 0 && i < int64(len(cm.msgs)):
		if cm.msgs[i] != nil {
			return
		}
	case i >= int64(len(cm.msgs)) && i < maxWindow:
		sh.bytes -= cm.bytes
		cm.bytes += int(i+1-int64(len(cm.msgs))) * msgOverhead
		sh.bytes += cm.bytes
		cm.msgs = append(cm.msgs, make([][]byte, i+1-int64(len(cm.msgs)))...)
	case i < 0 && int64(len(cm.msgs))-i <= maxWindow:
		grown := make([][]byte, int64(len(cm.msgs))-i)
		copy(grown[-i:], cm.msgs)
		sh.bytes -= cm.bytes
		cm.bytes += int(-i) * msgOverhead
		sh.bytes += cm.bytes
		cm.msgs, cm.base, i = grown, k.seq, 0
	default: // too far from the window: start a new one at this message
		sh.bytes -= cm.bytes
		cm.msgs, cm.base, cm.bytes, i = make([][]byte, 1), k.seq, msgOverhead, 0
		sh.bytes += cm.bytes
	}
	cm.msgs[i] = b
	cm.bytes += len(b)
	sh.bytes += len(b)
	cm.hot = true
	if sh.bytes > c.shardBudget {
		sh.evictLocked(c.shardBudget, ck)
	}
}

// evictLocked drops conversations until the shard is within budget: those
// not read since the last pass first (the pass clears the marks), keeping
// the one just written.
func (sh *msgShard) evictLocked(budget int, keep convKey) {
	for pass := 0; pass < 2 && sh.bytes > budget; pass++ {
		for k, cm := range sh.convs {
			if sh.bytes <= budget*3/4 {
				return
			}
			if k == keep {
				continue
			}
			if cm.hot && pass == 0 {
				cm.hot = false
				continue
			}
			sh.bytes -= cm.bytes
			delete(sh.convs, k)
		}
	}
}

// len counts the cached messages (tests).
func (c *msgCache) len() int {
	if c == nil {
		return 0
	}
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for _, cm := range sh.convs {
			for _, b := range cm.msgs {
				if b != nil {
					n++
				}
			}
		}
		sh.mu.Unlock()
	}
	return n
}
