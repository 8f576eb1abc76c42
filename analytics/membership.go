package analytics

import (
	"time"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

// Membership as the projection keeps it (docs/protocol.md, "Roles" and
// "Ban and mute"): the fan-out of a message is the members at its send,
// and who is a member depends on roles and bans, so analytics follows
// them with the projection's own rules (package projection), judged at
// the log position and a ban or mute by the event's "at", as the
// projector does. It keeps only what those rules read: members, the
// owner and the other roles, whether roles are enforced, and the bans
// and mutes with their lapse time. What an event refused by those rules
// would have done is not done; refused events are still counted by their
// header (see docs/decisions.md, "Analytics after moderation").

// conv is what analytics knows of one conversation.
type conv struct {
	members map[int64]struct{}
	// enforced: roles limit adding and removing (conversation.created's
	// roles). owner is 0 when there is none; roles holds the roles other
	// than member and owner of current members.
	enforced bool
	owner    int64
	roles    map[int64]string
	// bans and mutes by user: when each lapses (nil: until lifted).
	bans, mutes map[int64]*time.Time
}

func (c *conv) isMember(u int64) bool {
	_, ok := c.members[u]
	return ok
}

// role is u's role, member for a user without another or no member.
func (c *conv) role(u int64) string {
	if u != 0 && u == c.owner {
		return events.RoleOwner
	}
	if r, ok := c.roles[u]; ok {
		return r
	}
	return events.RoleMember
}

// setRole gives member u the role role: a new owner makes the one before
// it an admin.
func (c *conv) setRole(u int64, role string) {
	switch {
	case role == events.RoleOwner:
		if prev := c.owner; prev != 0 && prev != u {
			c.roles[prev] = events.RoleAdmin
		}
		c.owner = u
		delete(c.roles, u)
		return
	case c.owner == u:
		c.owner = 0
	}
	if role == events.RoleMember {
		delete(c.roles, u)
	} else {
		c.roles[u] = role
	}
}

// leave removes member u: a rejoin starts as a member, and an owner who
// leaves leaves the conversation without one.
func (c *conv) leave(u int64) {
	delete(c.members, u)
	delete(c.roles, u)
	if c.owner == u {
		c.owner = 0
	}
}

// standing says whether the sanction in set (bans or mutes) of u stands
// at time at.
func standing(set map[int64]*time.Time, u int64, at time.Time) bool {
	until, ok := set[u]
	return ok && projection.Standing(until, at)
}

// muted says whether the sender of e is muted when e happens; a
// service's own message (actor 0) never is.
func (c *conv) muted(e *events.Event) bool {
	return e.ActorID != 0 && standing(c.mutes, e.ActorID, e.At)
}

// refused says whether the projection refuses a membership event of e's
// actor in c (nil: an unknown conversation): the actor must be a member,
// unless it is a service acting as itself (actor 0).
func refused(c *conv, e *events.Event) bool {
	return c == nil || e.ActorID != 0 && !c.isMember(e.ActorID)
}

// sanctionRefused adds to refused the rule of bans and mutes: a member
// of a higher role than its target, moderator or above, never itself.
func sanctionRefused(c *conv, e *events.Event) bool {
	return refused(c, e) || e.ActorID != 0 &&
		(e.ActorID == e.UserID || !projection.MaySanction(c.role(e.ActorID), c.role(e.UserID)))
}

// apply changes membership, roles and sanctions as the projection does;
// an event it refuses, and creating an existing conversation, change
// nothing.
func (p *partition) apply(e *events.Event) {
	c := p.convs[e.ConversationID]
	switch e.Type {
	case events.ConversationCreated:
		if c != nil {
			return
		}
		c = &conv{members: map[int64]struct{}{}, enforced: e.Roles, roles: map[int64]string{},
			bans: map[int64]*time.Time{}, mutes: map[int64]*time.Time{}}
		// A service creating a conversation for users (actor 0) is no
		// member; a user who creates one owns it.
		if e.ActorID != 0 {
			c.members[e.ActorID] = struct{}{}
			c.owner = e.ActorID
		}
		for _, u := range e.Members {
			c.members[u] = struct{}{}
		}
		p.convs[e.ConversationID] = c
	case events.MemberAdded:
		if refused(c, e) || c.isMember(e.UserID) ||
			e.ActorID != 0 && !projection.MayAdd(c.role(e.ActorID), c.enforced) ||
			standing(c.bans, e.UserID, e.At) {
			return
		}
		c.members[e.UserID] = struct{}{}
	case events.MemberRemoved:
		if refused(c, e) || !c.isMember(e.UserID) ||
			e.ActorID != 0 && e.ActorID != e.UserID && !projection.MayRemove(c.role(e.ActorID), c.role(e.UserID), c.enforced) {
			return
		}
		c.leave(e.UserID)
	case events.MemberRoleSet:
		if refused(c, e) || !c.isMember(e.UserID) ||
			e.ActorID != 0 && (e.ActorID == e.UserID || !projection.MaySetRole(c.role(e.ActorID), c.role(e.UserID), e.Role)) {
			return
		}
		c.setRole(e.UserID, e.Role)
	case events.MemberBanned:
		if sanctionRefused(c, e) {
			return
		}
		c.bans[e.UserID] = e.Until
		if c.isMember(e.UserID) {
			c.leave(e.UserID)
		}
	case events.MemberUnbanned:
		if !sanctionRefused(c, e) {
			delete(c.bans, e.UserID)
		}
	case events.MemberMuted:
		if !sanctionRefused(c, e) && c.isMember(e.UserID) {
			c.mutes[e.UserID] = e.Until
		}
	case events.MemberUnmuted:
		if !sanctionRefused(c, e) {
			delete(c.mutes, e.UserID)
		}
	}
}
