package projection

import "github.com/inboxd/inboxd/events"

// The rules of a conversation's settings (docs/protocol.md, "Frozen and
// slow mode"), shared by the projector, which judges every
// conversation.updated and every write into a frozen conversation at its
// log position, and the gateway, which answers the same refusals early.
// A service acting as itself is judged by none of them. Slow mode is the
// gateway's alone (its send admission): the projection cannot judge it,
// the time of an event being a gateway's clock (docs/decisions.md,
// "Conversation settings").

// ReasonFrozen: the actor of a message.sent, message.edited,
// message.deleted, reaction.added, reaction.removed or member.added is
// below admin in a frozen conversation.
const ReasonFrozen = "frozen"

// MayRename says whether a member of role actor may change the title:
// an admin or the owner where roles are enforced, any member otherwise
// (as adding members).
func MayRename(actor string, enforced bool) bool {
	return !enforced || Rank(actor) >= Rank(events.RoleAdmin)
}

// MayFreeze says whether a member of role actor may freeze or unfreeze
// the conversation: an admin or the owner, roles enforced or not (no log
// before freezing holds a freeze to judge otherwise).
func MayFreeze(actor string) bool {
	return Rank(actor) >= Rank(events.RoleAdmin)
}

// MaySetSlowMode says whether a member of role actor may set the slow
// mode: a moderator and above, roles enforced or not.
func MaySetSlowMode(actor string) bool {
	return Rank(actor) >= Rank(events.RoleModerator)
}

// MayUpdate says whether a member of role actor may make the changes of
// a conversation.updated: every setting it carries, whether or not it
// changes anything. It returns the first one refused ("" when all are
// allowed) for the answer.
func MayUpdate(actor string, enforced, title, frozen, slowMode bool) (refused string) {
	switch {
	case title && !MayRename(actor, enforced):
		return "rename it"
	case frozen && !MayFreeze(actor):
		return "freeze or unfreeze it"
	case slowMode && !MaySetSlowMode(actor):
		return "set its slow mode"
	}
	return ""
}

// WritesWhileFrozen says whether a member of role actor may still write
// (send, edit, delete, react, add members) in a frozen conversation: an
// admin or the owner.
func WritesWhileFrozen(actor string) bool {
	return Rank(actor) >= Rank(events.RoleAdmin)
}

// SlowModeExempt says whether a member of role actor sends without the
// conversation's slow mode: a moderator and above.
func SlowModeExempt(actor string) bool {
	return Rank(actor) >= Rank(events.RoleModerator)
}
