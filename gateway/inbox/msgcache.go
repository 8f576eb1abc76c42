package inbox

import (
	"sync"
	"time"
)

// msgKey identifies a message within one epoch (a replay may renumber).
type msgKey struct{ epoch, conv, seq int64 }

const msgCacheShards = 64

// msgCache holds the wire form of messages, bounded by bytes. A message
// can change (an edit, a delete, a reaction): the projector's notification
// of a change makes every gateway forget its copy (forget) and remember,
// for a while, the version it must not go below, so that a read that was in
// flight during the change cannot put the old state back. Messages with
// reactions are not cached: each reader sees its own reaction marked. It is kept
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
	// epochs counts the conversations cached per epoch (one or two).
	epochs map[int64]int
	// floors are the versions below which a message (conv, seq) is not
	// cached: set by forget, dropped after floorTTL.
	floors map[[2]int64]floor
}

type floor struct {
	version int64
	at      time.Time
}

// floorTTL is how long a floor is kept: longer than any read in flight.
const floorTTL = time.Minute

type convKey struct{ epoch, conv int64 }

// convMsgs is a window of one conversation's messages: msgs[i] is seq
// base+i (nil when not cached).
type convMsgs struct {
	base  int64
	msgs  [][]byte
	vers  []int64 // the version of msgs[i]
	bytes int     // the messages' bytes plus the slots
	hot   bool    // read since the last eviction pass
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
		c.shards[i].reset()
	}
	return c
}

func (sh *msgShard) reset() {
	sh.convs, sh.epochs, sh.floors, sh.bytes = map[convKey]*convMsgs{}, map[int64]int{}, map[[2]int64]floor{}, 0
}

// forget drops every copy of message (conv, seq) older than version and
// keeps such copies out for floorTTL (a copy of that version, put by the
// answer to the change itself, stays).
func (c *msgCache) forget(conv, seq, version int64) {
	if c == nil {
		return
	}
	sh := c.shard(conv)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := time.Now()
	if len(sh.floors) > 4096 {
		for k, f := range sh.floors {
			if now.Sub(f.at) > floorTTL {
				delete(sh.floors, k)
			}
		}
	}
	k := [2]int64{conv, seq}
	if f, ok := sh.floors[k]; !ok || f.version < version {
		sh.floors[k] = floor{version: version, at: now}
	}
	for epoch := range sh.epochs {
		cm := sh.convs[convKey{epoch, conv}]
		if cm == nil {
			continue
		}
		if i := seq - cm.base; i >= 0 && i < int64(len(cm.msgs)) && cm.msgs[i] != nil && cm.vers[i] < version {
			cm.bytes -= len(cm.msgs[i])
			sh.bytes -= len(cm.msgs[i])
			cm.msgs[i] = nil
		}
	}
}

// clear drops everything: the notifications of changes may have been lost.
func (c *msgCache) clear() {
	if c == nil {
		return
	}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		sh.reset()
		sh.mu.Unlock()
	}
}

func (c *msgCache) shard(conv int64) *msgShard {
	return &c.shards[(uint64(conv)*0x9E3779B97F4A7C15>>32)%msgCacheShards]
}

// get returns the cached wire form of message k if its version is at
// least minVersion (an update entry's: a copy older than the change it
// announces must not answer it, even before the change's notification made
// this gateway forget it).
func (c *msgCache) get(k msgKey, minVersion int64) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	sh := c.shard(k.conv)
	sh.mu.Lock()
	var b []byte
	if cm := sh.convs[convKey{k.epoch, k.conv}]; cm != nil {
		if i := k.seq - cm.base; i >= 0 && i < int64(len(cm.msgs)) && cm.vers[i] >= minVersion {
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

// put caches b, the wire form of message k at version.
func (c *msgCache) put(k msgKey, version int64, b []byte) {
	if c == nil || b == nil {
		return
	}
	sh := c.shard(k.conv)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f, ok := sh.floors[[2]int64{k.conv, k.seq}]; ok {
		if version < f.version {
			return // changed since this copy was read
		}
		if time.Since(f.at) > floorTTL {
			delete(sh.floors, [2]int64{k.conv, k.seq})
		}
	}
	ck := convKey{k.epoch, k.conv}
	cm := sh.convs[ck]
	if cm == nil {
		cm = &convMsgs{base: k.seq}
		sh.convs[ck] = cm
		sh.epochs[k.epoch]++
	}
	i := k.seq - cm.base
	switch {
	case i >= 0 && i < int64(len(cm.msgs)):
		if cm.msgs[i] != nil && cm.vers[i] >= version {
			return
		}
		if cm.msgs[i] != nil {
			cm.bytes -= len(cm.msgs[i])
			sh.bytes -= len(cm.msgs[i])
		}
	case i >= int64(len(cm.msgs)) && i < maxWindow:
		sh.bytes -= cm.bytes
		cm.bytes += int(i+1-int64(len(cm.msgs))) * msgOverhead
		sh.bytes += cm.bytes
		cm.vers = append(cm.vers, make([]int64, i+1-int64(len(cm.msgs)))...)
		cm.msgs = append(cm.msgs, make([][]byte, i+1-int64(len(cm.msgs)))...)
	case i < 0 && int64(len(cm.msgs))-i <= maxWindow:
		grown := make([][]byte, int64(len(cm.msgs))-i)
		copy(grown[-i:], cm.msgs)
		grownV := make([]int64, len(grown))
		copy(grownV[-i:], cm.vers)
		cm.vers = grownV
		sh.bytes -= cm.bytes
		cm.bytes += int(-i) * msgOverhead
		sh.bytes += cm.bytes
		cm.msgs, cm.base, i = grown, k.seq, 0
	default: // too far from the window: start a new one at this message
		sh.bytes -= cm.bytes
		cm.msgs, cm.vers, cm.base, cm.bytes, i = make([][]byte, 1), make([]int64, 1), k.seq, msgOverhead, 0
		sh.bytes += cm.bytes
	}
	cm.msgs[i], cm.vers[i] = b, version
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
			if sh.epochs[k.epoch]--; sh.epochs[k.epoch] <= 0 {
				delete(sh.epochs, k.epoch)
			}
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
