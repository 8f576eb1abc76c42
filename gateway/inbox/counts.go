package inbox

import (
	"sync"

	"github.com/inboxd/inboxd/protocol"
)

// The totals of a sync answer (unread_total, mention_total) are a function
// of the user's inbox at its head and of its read-mode conversations: every
// change that moves a count (a message the user can see, a read, a mute, a
// membership change, a delete) is an entry of the user's inbox, except the
// messages and changes of read-mode conversations, which write no entry
// for the members they do not mention (docs/large-conversations.md) and
// move the conversation's last_seq or change_count instead. So a Reader
// remembers the totals it counted at each user's (epoch, head, large
// mark), the mark being a digest of the large list read in the same
// snapshot, and a sync at the same state (a long-poll that timed out, a
// reconnecting client, a poll with nothing new) does not count them again:
// the statement skips the count when the state it reads is the remembered
// one.

// DefaultCountsCacheUsers is the default of Config.CountsCacheUsers.
const DefaultCountsCacheUsers = 1 << 16

type countsAt struct {
	epoch, head int64
	large       string // Page.LargeMark
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
