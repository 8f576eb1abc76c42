package projector

import (
	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

// Roles (docs/protocol.md, "Roles"): the rules themselves are
// projection's (projection/roles.go), shared with the gateway; here they
// are applied at the log position. A batch knows the roles of the members
// it loaded (all of them, or in a read-mode conversation those the batch
// names, docs/large-conversations.md) and the owner from the
// conversation's row, so that a transfer of ownership demotes an owner the
// batch did not load: the roles it sets are written by (conversation,
// user), never read back.

// role is u's role in c: owner, a loaded member's, or member.
func (c *convState) role(u int64) string {
	if u != 0 && u == c.owner {
		return events.RoleOwner
	}
	if r, ok := c.roles[u]; ok {
		return r
	}
	return events.RoleMember
}

// setRole gives member u of c the role role: an owner replaces the one
// before it, who becomes an admin.
func (b *batch) setRole(c *convState, u int64, role string) {
	switch {
	case role == events.RoleOwner:
		if prev := c.owner; prev != 0 && prev != u {
			b.setRole(c, prev, events.RoleAdmin)
		}
		c.owner = u
	case c.owner == u:
		c.owner = 0
	}
	if c.roles == nil {
		c.roles = map[int64]string{}
	}
	if role == events.RoleMember {
		delete(c.roles, u)
	} else {
		c.roles[u] = role
	}
	k := recKey{u, c.id}
	if s, ok := b.openNew[k]; ok {
		s.role = role
		return
	}
	b.spanRoles[k] = role
}

// leftRole forgets the role of u, just removed from c: its closed span
// keeps the role it left with, and a rejoin starts as a member. An owner
// who leaves leaves the conversation without one.
func (b *batch) leftRole(c *convState, u int64) {
	delete(c.roles, u)
	if c.owner == u {
		c.owner = 0
	}
}

// memberRoleSet sets a member's role, judged by projection.MaySetRole for
// a user (a service acting as itself sets any role). Setting the role a
// member has changes nothing; a change is a system message, which the
// member (and an owner it replaces) gets in read mode too.
func (b *batch) memberRoleSet(r Record, c *convState) {
	e := r.Event
	if b.membershipRefused(r, c) {
		return
	}
	if !c.members[e.UserID] {
		b.reject(r, projection.ReasonNoMember)
		return
	}
	cur := c.role(e.UserID)
	if e.ActorID != 0 && (e.ActorID == e.UserID || !projection.MaySetRole(c.role(e.ActorID), cur, e.Role)) {
		b.reject(r, projection.ReasonRole)
		return
	}
	if cur == e.Role {
		return
	}
	prev := c.owner
	b.setRole(c, e.UserID, e.Role)
	body := map[string]any{"event": events.MemberRoleSet, "user_id": e.UserID, "role": e.Role, "by": e.ActorID}
	demoted := e.Role == events.RoleOwner && prev != 0 && prev != e.UserID
	if demoted {
		body["previous_owner"] = prev
	}
	seq := b.message(c, e.EventID, e.ActorID, "system", systemBody(body), e.At)
	b.fanTo(c, e.UserID, seq, e.At)
	// Records show their user's role: a new version of the member's (and
	// of a replaced owner's, when the batch loaded it).
	b.touchRecord(e.UserID, c.id, e)
	if demoted {
		b.fanTo(c, prev, seq, e.At)
		b.touchRecord(prev, c.id, e)
	}
}
