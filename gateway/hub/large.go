package hub

import (
	"sync"

	"github.com/inboxd/inboxd/projection"
)

// Read-mode conversations (docs/large-conversations.md): their moves do not
// move the members' inbox heads, so waiters that care subscribe by
// conversation (a held long-poll of a member: WatchConversations) or
// listen to every such token (the WebSocket server's index:
// ListenReadFanout).

// ReadFanout is what a notification says of read-mode conversations, as
// handed to the listeners of ListenReadFanout. Reset says that
// notifications may have been lost (a new LISTEN connection) or that a
// replay started a new epoch: a listener re-reads what it keeps.
type ReadFanout struct {
	Large   []projection.Large
	Members []projection.Membership
	Modes   []projection.Mode
	Reset   bool
}

// convWatch is the hub's state of read-mode conversations: the waiters by
// conversation and the listeners.
type convWatch struct {
	mu        sync.Mutex
	convs     map[int64]map[*Subscription]struct{}
	listeners map[*func(ReadFanout)]struct{}
}

// WatchConversations also wakes s when one of convs moves or switches (an
// L or S token); the returned stop undoes it (s.Close does not).
func (h *Hub) WatchConversations(s *Subscription, convs []int64) (stop func()) {
	w := &h.convWatch
	w.mu.Lock()
	if w.convs == nil {
		w.convs = map[int64]map[*Subscription]struct{}{}
	}
	for _, c := range convs {
		set := w.convs[c]
		if set == nil {
			set = map[*Subscription]struct{}{}
			w.convs[c] = set
		}
		set[s] = struct{}{}
	}
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		for _, c := range convs {
			if set := w.convs[c]; set != nil {
				delete(set, s)
				if len(set) == 0 {
					delete(w.convs, c)
				}
			}
		}
		w.mu.Unlock()
	}
}

// ListenReadFanout hands f every notification's read-mode tokens, and a
// Reset whenever notifications may have been lost. f runs on the LISTEN
// goroutine: it must not block. stop removes it.
func (h *Hub) ListenReadFanout(f func(ReadFanout)) (stop func()) {
	w := &h.convWatch
	w.mu.Lock()
	if w.listeners == nil {
		w.listeners = map[*func(ReadFanout)]struct{}{}
	}
	w.listeners[&f] = struct{}{}
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.listeners, &f)
		w.mu.Unlock()
	}
}

// readFanout handles the read-mode tokens of n: the heads of users whose
// list changed are forgotten by the head cache (their ETag changes without
// their head; see gateway's notModified), the waiters of the conversations
// and of the users are returned to be woken, and the listeners are told.
func (h *Hub) readFanout(n *projection.Notification) (wake []*Subscription) {
	if len(n.Large)+len(n.Members)+len(n.Modes) == 0 && n.Epoch == 0 {
		return nil
	}
	for _, m := range n.Members {
		h.HeadsOf(m.User).forget(m.User)
		sh := &h.users[uint64(m.User)%hubShards]
		sh.mu.Lock()
		for s := range sh.subs[m.User] {
			wake = append(wake, s)
		}
		sh.mu.Unlock()
	}
	if len(n.Modes) > 0 {
		// Rare: whose list a switch changes is not known here.
		for _, c := range h.heads {
			c.forgetAll()
		}
	}
	w := &h.convWatch
	w.mu.Lock()
	for _, l := range n.Large {
		for s := range w.convs[l.Conv] {
			wake = append(wake, s)
		}
	}
	for _, m := range n.Modes {
		for s := range w.convs[m.Conv] {
			wake = append(wake, s)
		}
	}
	rf := ReadFanout{Large: n.Large, Members: n.Members, Modes: n.Modes, Reset: n.Epoch != 0}
	for f := range w.listeners {
		(*f)(rf)
	}
	w.mu.Unlock()
	return wake
}

// resetReadFanout tells the listeners that notifications may have been
// lost.
func (h *Hub) resetReadFanout() {
	w := &h.convWatch
	w.mu.Lock()
	for f := range w.listeners {
		(*f)(ReadFanout{Reset: true})
	}
	w.mu.Unlock()
}
