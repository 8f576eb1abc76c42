package projector

import "sync"

// The conversation cache: the state of the conversations a projector's own
// committed batches left, kept between batches so that the next batch of
// the same partition does not read it again (the conversation's row, its
// current members and the armed flags: three statements of the batch's
// first round trip).
//
// A conversation's state changes only through the records of its
// partition, and every batch of a partition holds the partition's offset
// row locked and moves it. So the state a projector wrote for a
// conversation is still the database's while the partition's stored next
// offset is the one that projector's last batch of it committed: the cache
// is checked against the offsets the batch's first round trip locks, and a
// partition whose offset moved otherwise (another fanout after a
// rebalance, a restore, a replay's swap) has its conversations read from
// the database again. Only conversations whose members are all known in
// memory are kept: write fan-out ones (read fan-out ones hold only the
// members a batch names, docs/large-conversations.md).

// DefaultConversationCache is the conversations a projector keeps at most.
const DefaultConversationCache = 1 << 16

// convCache is safe for concurrent use.
type convCache struct {
	max int

	mu      sync.Mutex
	entries map[int64]cachedConv
	parts   map[int32]cachedPart
	epochs  int64 // the last epoch given
	// gen counts the clears: a batch that began before one (its update
	// carries the gen it saw) stores nothing, since what it read may be
	// what the clear was for.
	gen int64
}

// cachedPart is a partition's next offset as the projector last committed
// it, and the epoch of its entries: a new epoch starts when the projector
// commits a batch of a partition whose offset it did not leave where the
// batch found it, so that entries from before the gap never count again.
type cachedPart struct{ next, epoch int64 }

// cachedConv is what a batch loads of a conversation: its row and its
// members (with the seq each one's span began).
type cachedConv struct {
	partition                                    int32
	epoch                                        int64
	lastSeq, by, texts, memberCount, changeCount int64
	channel                                      bool
	joined                                       map[int64]int64
	// Roles: whether they are enforced, the owner, and the members'
	// roles other than member.
	enforced bool
	owner    int64
	roles    map[int64]string
	// Settings: the title, frozen and the slow mode.
	title    string
	frozen   bool
	slowMode int
}

// cacheHit is a conversation a batch takes from the cache, valid if its
// partition's stored offset is still want.
type cacheHit struct {
	conv cachedConv
	want int64
}

func newConvCache(max int) *convCache {
	if max < 0 {
		return nil
	}
	if max == 0 {
		max = DefaultConversationCache
	}
	return &convCache{max: max}
}

// lookup returns the cached conversations of a batch whose conversations
// come from the partitions convParts gives (convPartitions: -1 for one
// that comes from several, never cached), each with the stored offset its
// partition must still have.
func (cc *convCache) lookup(convParts map[int64]int32) map[int64]cacheHit {
	if cc == nil {
		return nil
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	var hits map[int64]cacheHit
	for id, p := range convParts {
		e, ok := cc.entries[id]
		pt, okp := cc.parts[p]
		if !ok || !okp || e.partition != p || e.epoch != pt.epoch {
			continue
		}
		if hits == nil {
			hits = map[int64]cacheHit{}
		}
		hits[id] = cacheHit{conv: e, want: pt.next}
	}
	return hits
}

// state returns a copy of h's conversation as a batch loads it.
func (h cacheHit) state(id int64) *convState {
	c := h.conv
	s := &convState{id: id, exists: true, lastSeq: c.lastSeq, loadedAt: c.lastSeq, by: c.by, texts: c.texts,
		channel: c.channel, memberCount: c.memberCount, changeCount: c.changeCount,
		members: make(map[int64]bool, len(c.joined)), joined: make(map[int64]int64, len(c.joined)),
		enforced: c.enforced, owner: c.owner, title: c.title, frozen: c.frozen, slowMode: c.slowMode}
	for u, j := range c.joined {
		s.members[u], s.joined[u] = true, j
	}
	if len(c.roles) > 0 {
		s.roles = make(map[int64]string, len(c.roles))
		for u, r := range c.roles {
			s.roles[u] = r
		}
	}
	return s
}

// cacheUpdate is what a batch leaves for the cache once it has committed:
// the partitions it moved (from, to) and the conversations it read or
// wrote in them, nil where a conversation is not to be kept.
type cacheUpdate struct {
	gen   int64
	moved map[int32][2]int64
	convs map[int64]*cachedConv
}

// generation is the cache's count of clears (for cacheUpdate.gen).
func (cc *convCache) generation() int64 {
	if cc == nil {
		return 0
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.gen
}

// update takes the state t's batch leaves (before its commit: the cache
// takes it only after).
func (t *txn) cacheUpdate() *cacheUpdate {
	if t.p.cache == nil || !t.own {
		return nil
	}
	u := &cacheUpdate{gen: t.gen, moved: map[int32][2]int64{}, convs: map[int64]*cachedConv{}}
	for pt, next := range t.parts {
		if next > t.stored[pt] {
			u.moved[pt] = [2]int64{t.stored[pt], next}
		}
	}
	for id, c := range t.b.convs {
		pt, ok := t.convParts[id]
		if !ok {
			continue
		}
		if _, moved := u.moved[pt]; !moved {
			continue
		}
		if !c.exists || c.read || c.partial || len(c.armed) > 0 || len(c.joined) != len(c.members) {
			u.convs[id] = nil
			continue
		}
		cc := &cachedConv{partition: pt, lastSeq: c.lastSeq, by: c.by, texts: c.texts, memberCount: c.memberCount,
			changeCount: c.changeCount, channel: c.channel, joined: make(map[int64]int64, len(c.joined)),
			enforced: c.enforced, owner: c.owner, title: c.title, frozen: c.frozen, slowMode: c.slowMode}
		for m, r := range c.roles {
			if cc.roles == nil {
				cc.roles = map[int64]string{}
			}
			cc.roles[m] = r
		}
		for m, j := range c.joined {
			if !c.members[m] {
				u.convs[id] = nil
				cc = nil
				break
			}
			cc.joined[m] = j
		}
		if cc != nil {
			u.convs[id] = cc
		}
	}
	return u
}

// store keeps what a committed batch left.
func (cc *convCache) store(u *cacheUpdate) {
	if cc == nil || u == nil || len(u.moved) == 0 {
		return
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if u.gen != cc.gen {
		return
	}
	if cc.entries == nil || len(cc.entries)+len(u.convs) > cc.max {
		cc.entries, cc.parts = map[int64]cachedConv{}, map[int32]cachedPart{}
	}
	for pt, m := range u.moved {
		p, ok := cc.parts[pt]
		if !ok || p.next != m[0] {
			cc.epochs++
			p.epoch = cc.epochs
		}
		p.next = m[1]
		cc.parts[pt] = p
	}
	for id, c := range u.convs {
		if c == nil {
			delete(cc.entries, id)
			continue
		}
		c.epoch = cc.parts[c.partition].epoch
		cc.entries[id] = *c
	}
}

// clear drops everything (the database may have changed under the cache).
func (cc *convCache) clear() {
	if cc == nil {
		return
	}
	cc.mu.Lock()
	cc.entries, cc.parts = nil, nil
	cc.gen++
	cc.mu.Unlock()
}

// size is the conversations kept.
func (cc *convCache) size() int {
	if cc == nil {
		return 0
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return len(cc.entries)
}
