package projection

import "github.com/inboxd/inboxd/events"

// The rules of roles (docs/protocol.md, "Roles"): what a member of each
// role may do to others. The projector judges every event by them at its
// log position; the gateway answers the same refusal early (403) from
// the projection it reads. Both call these functions, so that the two
// cannot drift. A service acting as itself is judged by none of them;
// one acting for a user, by the user's.

// ReasonRole: the actor's role does not allow the change (adding or
// removing members, setting a role, deleting another's message).
const ReasonRole = "role"

// ReasonNoMember: the user a role is set for is not a member.
const ReasonNoMember = "no_member"

// Rank orders the roles: owner 3, admin 2, moderator 1, member (and any
// unknown name) 0.
func Rank(role string) int {
	switch role {
	case events.RoleOwner:
		return 3
	case events.RoleAdmin:
		return 2
	case events.RoleModerator:
		return 1
	}
	return 0
}

// MayAdd says whether a member of role actor may add members. In a
// conversation without roles (enforced false: created before them) any
// member may.
func MayAdd(actor string, enforced bool) bool {
	return !enforced || Rank(actor) >= Rank(events.RoleAdmin)
}

// MayRemove says whether a member of role actor may remove another
// member of role target: an admin or the owner, of a member below it.
// Leaving (removing oneself) is always allowed and not judged here.
func MayRemove(actor, target string, enforced bool) bool {
	if !enforced {
		return true
	}
	return Rank(actor) >= Rank(events.RoleAdmin) && Rank(actor) > Rank(target)
}

// MaySetRole says whether a member of role actor may give another member
// of role target the role role: the owner any role to anyone (owner:
// a transfer of ownership), an admin moderator or member to a moderator
// or member. Nobody sets its own role.
func MaySetRole(actor, target, role string) bool {
	switch actor {
	case events.RoleOwner:
		return true
	case events.RoleAdmin:
		return Rank(target) < Rank(events.RoleAdmin) && Rank(role) < Rank(events.RoleAdmin)
	}
	return false
}

// MayDeleteOthers says whether a member of role actor may delete another
// member's message: a moderator and above. Everyone may delete its own.
func MayDeleteOthers(actor string) bool {
	return Rank(actor) >= Rank(events.RoleModerator)
}
