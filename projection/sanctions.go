package projection

import (
	"time"

	"github.com/inboxd/inboxd/events"
)

// The rules of bans and mutes (docs/protocol.md, "Ban and mute"), shared
// by the projector, which judges every event at its log position, and the
// gateway, which answers the same refusals early. Unlike adding and
// removing members they hold in every conversation, whether or not its
// roles are enforced: no log before them holds such events, so there is
// no earlier judgement for a replay to keep.

// ReasonBanned: the user a member.added adds is banned from the
// conversation.
const ReasonBanned = "banned"

// ReasonMuted: the actor of a message.sent, message.edited or
// reaction.added is muted in the conversation.
const ReasonMuted = "muted"

// The kinds of sanctions, as stored (the sanctions table's kind).
const (
	SanctionBan  = "ban"
	SanctionMute = "mute"
)

// MaySanction says whether a member of role actor may ban, unban, mute or
// unmute a user of role target (a user who is no member: member): a
// moderator and above, of a user of a lower role. Nobody sanctions itself.
func MaySanction(actor, target string) bool {
	return Rank(actor) >= Rank(events.RoleModerator) && Rank(actor) > Rank(target)
}

// Standing says whether a ban or mute that lapses at until (nil: never)
// still stands at time at.
func Standing(until *time.Time, at time.Time) bool {
	return until == nil || until.After(at)
}
