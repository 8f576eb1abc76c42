package inbox

import (
	"sync"

	"github.com/inboxd/inboxd/protocol"
)

// The totals of a sync answer (unread_total, mention_total) are a function
// of the user's inbox at its head: every change that moves a count (a
// message the user can see, a read, a mute, a membership change, a delete)
// is an entry of the user's inbox. So a Reader remembers the totals it
// counted at each user's (epoch, head), and a sync at the same head (a
// long-poll that timed out, a reconnecting client, a poll with nothing
// new) does not count them again: the statement skips the count when the
// head it reads is the remembered one.

// DefaultCountsCacheUsers is the default of Config.CountsCacheUsers.
const DefaultCountsCacheUsers = 1 << 16

type countsAt struct {
	epoch, head int64
	counts      protocol.Counts
}

// countsCache is a bounded map of users' totals; when full, an arbitrary
// entry makes room. The zero value (and nil) remember nothing.
type countsCache struct {
	mu  sync.Mutex
	max int
	m   map[int64]countsAt
}

func newCountsCache(max int) *countsCache {
	if max <= 0 {
		return nil
	}
	return &countsCache{max: max, m: make(map[int64]countsAt)}
}

func (c *countsCache) get(user int64) (countsAt, bool) {
	if c == nil {
		return countsAt{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.m[user]
	return at, ok
}

func (c *countsCache) put(user int64, at countsAt) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[user]; !ok && len(c.m) >= c.max {
		for u := range c.m {
			delete(c.m, u)
			break
		}
	}
	c.m[user] = at
}
