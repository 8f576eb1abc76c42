package projector

import (
	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

// Conversation settings (docs/protocol.md, "Frozen and slow mode"): the
// rules are projection's (projection/settings.go), shared with the
// gateway; here they are applied at the log position. A batch knows a
// conversation's title, frozen and slow mode from its row (or the cache)
// and writes them back whole.

// frozenFor says whether e's actor is refused in c because c is frozen:
// a user below admin (a service acting as itself never is).
func (b *batch) frozenFor(c *convState, e *events.Event) bool {
	return c.frozen && e.ActorID != 0 && !projection.WritesWhileFrozen(c.role(e.ActorID))
}

// conversationUpdated applies the settings e carries, judged by
// projection.MayUpdate for a user (a service acting as itself changes
// any). The settings it sets to what they are change nothing; if none
// changes, there is no message. A change is a system message naming the
// settings it changed, which every member receives in write fan-out (in
// read fan-out they read it in the history), and a new version of every
// member's record that the batch loaded (all of them in write fan-out),
// so that ?since_version= shows the record's new settings.
func (b *batch) conversationUpdated(r Record, c *convState) {
	e := r.Event
	if b.membershipRefused(r, c) {
		return
	}
	if e.ActorID != 0 && projection.MayUpdate(c.role(e.ActorID), c.enforced, e.Title != "", e.Frozen != nil, e.SlowMode != nil) != "" {
		b.reject(r, projection.ReasonRole)
		return
	}
	body := map[string]any{"event": events.ConversationUpdated, "by": e.ActorID}
	if e.Title != "" && e.Title != c.title {
		c.title, body["title"] = e.Title, e.Title
	}
	if e.Frozen != nil && *e.Frozen != c.frozen {
		c.frozen, body["frozen"] = *e.Frozen, *e.Frozen
	}
	if e.SlowMode != nil && *e.SlowMode != c.slowMode {
		c.slowMode, body["slow_mode"] = *e.SlowMode, *e.SlowMode
	}
	if len(body) == 2 {
		return
	}
	b.message(c, e.EventID, e.ActorID, "system", systemBody(body), e.At)
	if c.read {
		return // its members' records are not all loaded: see docs/decisions.md
	}
	for u := range c.members {
		b.touchRecord(u, c.id, e)
	}
}

// touchRecord gives user's record of conv a new version (and a record
// entry) without changing it, when the batch loaded it: a record the
// batch did not load is left alone rather than written from nothing.
func (b *batch) touchRecord(user, conv int64, e *events.Event) {
	if _, ok := b.records[recKey{user, conv}]; !ok {
		return
	}
	b.record(user, conv, e.At, func(*recState) {})
}
