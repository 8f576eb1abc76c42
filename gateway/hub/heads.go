package hub

import (
	"sync"
	"sync/atomic"
)

// HeadCache knows the inbox heads of users this process has read, kept
// current by the notifications: every commit's NOTIFY carries the new head
// of every user it touched, so while the LISTEN connection stays up, a head
// learned from a read and moved by the notifications since is the head in
// PostgreSQL (up to the notification's delivery, a few milliseconds). It
// lets a client at its head get its 304 without a query, which is most of
// the traffic of polling clients.
//
// Validity: everything is forgotten, and the generation moves, when the
// LISTEN connection drops or (re)connects (notifications may be lost) and
// when a replay announces a new epoch. A read only teaches the cache if the
// generation did not move while it ran, so a read from before an outage or
// an epoch change can never pass for current. A nil *HeadCache knows
// nothing.
type HeadCache struct {
	gen    atomic.Uint64 // odd while valid (listening), even while not
	epoch  atomic.Int64  // the epoch the heads belong to, 0 if unknown
	max    int           // users per shard before the shard is reset
	shards [hubShards]headShard
}

type headShard struct {
	mu    sync.Mutex
	heads map[int64]int64
}

func newHeadCache(users int) *HeadCache {
	if users <= 0 {
		return nil
	}
	c := &HeadCache{max: max(users/hubShards, 1)}
	for i := range c.shards {
		c.shards[i].heads = map[int64]int64{}
	}
	return c
}

// Generation is taken before a read and handed to Learn after it.
func (c *HeadCache) Generation() uint64 {
	if c == nil {
		return 0
	}
	return c.gen.Load()
}

// reset forgets everything; valid says whether notifications flow from now
// on (the LISTEN connection is up).
func (c *HeadCache) reset(valid bool) {
	c.clearWith(func(g uint64) uint64 {
		next := g + 1
		if (next%2 == 1) != valid {
			next++
		}
		return next
	})
}

// forgetAll forgets every head and moves the generation, valid or not as
// it was.
func (c *HeadCache) forgetAll() { c.clearWith(func(g uint64) uint64 { return g + 2 }) }

// clearWith moves the generation g to next(g) and forgets every head.
func (c *HeadCache) clearWith(next func(g uint64) uint64) {
	if c == nil {
		return
	}
	for {
		g := c.gen.Load()
		if c.gen.CompareAndSwap(g, next(g)) {
			break
		}
	}
	c.epoch.Store(0)
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		clear(sh.heads)
		sh.mu.Unlock()
	}
}

// seed sets the epoch of an empty, valid cache (the server's, read as
// the LISTEN connection came up), unless a read taught one already.
func (c *HeadCache) seed(epoch int64) {
	if c != nil {
		c.epoch.CompareAndSwap(0, epoch)
	}
}

// Learn records what a read saw, if nothing invalidated the cache since gen
// was taken before the read.
func (c *HeadCache) Learn(gen uint64, user, epoch, head int64) {
	if c == nil || gen%2 == 0 || c.gen.Load() != gen {
		return
	}
	if !c.epoch.CompareAndSwap(0, epoch) && c.epoch.Load() != epoch {
		// The database is at another epoch than the cache: a replay whose
		// announcement has not arrived. Start over at the new epoch.
		c.reset(true)
		return
	}
	sh := &c.shards[uint64(user)%hubShards]
	sh.mu.Lock()
	if c.gen.Load() == gen {
		if len(sh.heads) >= c.max {
			clear(sh.heads)
		}
		if old, ok := sh.heads[user]; !ok || head > old {
			sh.heads[user] = head
		}
	}
	sh.mu.Unlock()
}

// notified moves the heads of a notification forward (users not known are
// not added: only reads add users).
func (c *HeadCache) notified(heads map[int64]int64) {
	if c == nil {
		return
	}
	for user, head := range heads {
		sh := &c.shards[uint64(user)%hubShards]
		sh.mu.Lock()
		if old, ok := sh.heads[user]; ok && head > old {
			sh.heads[user] = head
		}
		sh.mu.Unlock()
	}
}

// forget drops user's head: its validator changed without its head (its
// large list, docs/large-conversations.md).
func (c *HeadCache) forget(user int64) {
	if c == nil {
		return
	}
	sh := &c.shards[uint64(user)%hubShards]
	sh.mu.Lock()
	delete(sh.heads, user)
	sh.mu.Unlock()
}

// Get returns the epoch and head of user if known.
func (c *HeadCache) Get(user int64) (epoch, head int64, ok bool) {
	if c == nil {
		return 0, 0, false
	}
	gen := c.gen.Load()
	if gen%2 == 0 {
		return 0, 0, false
	}
	epoch = c.epoch.Load()
	if epoch == 0 {
		return 0, 0, false
	}
	sh := &c.shards[uint64(user)%hubShards]
	sh.mu.Lock()
	head, ok = sh.heads[user]
	sh.mu.Unlock()
	if c.gen.Load() != gen || c.epoch.Load() != epoch {
		return 0, 0, false // a reset overlapped the lookup
	}
	return epoch, head, ok
}

// CurrentEpoch is the epoch of the heads, 0 when unknown or not valid.
func (c *HeadCache) CurrentEpoch() int64 {
	if c == nil || c.gen.Load()%2 == 0 {
		return 0
	}
	return c.epoch.Load()
}
