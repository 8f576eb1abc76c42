package projection

import "time"

// Inbox entry kinds as stored in inbox.kind.
const (
	KindMessage = 1
	KindRecord  = 2
	// KindUpdate: the message (conversation_id, seq) changed (edited,
	// deleted, reacted to); version is the message's version then.
	KindUpdate = 3
)

// Rejection reasons stored in rejections.reason for refused events.
const (
	ReasonNotMember      = "not_member"
	ReasonNoConversation = "no_conversation"
	ReasonExists         = "conversation_exists"
	// ReasonDeadLetter: the record failed to project, deterministically,
	// after the fanout's bounded retries, and went to the DLQ. It takes no
	// seq (its conversation's later messages continue without a hole) and
	// a send waiting on its msg_id learns it will not be delivered.
	ReasonDeadLetter = "dead_letter"

	// Refusals of a change to a message (edit, delete, reaction).
	ReasonNoMessage     = "no_message"     // no such seq, or one the actor cannot see
	ReasonNotSender     = "not_sender"     // an edit or delete of someone else's message
	ReasonDeleted       = "deleted"        // the message is deleted
	ReasonEditWindow    = "edit_window"    // the edit came after the edit window
	ReasonSystemMessage = "system_message" // system messages cannot change
	ReasonTooManyEmoji  = "too_many_reactions"
	ReasonUnsealable    = "unsealable"    // a sealed body that does not open with its key
	ReasonNoAttachment  = "no_attachment" // a thumbnail of a file the message does not attach

	// Refusals of a report and of its resolution (docs/protocol.md, "Reports").
	ReasonOwnMessage = "own_message" // a report of the reporter's own message
	ReasonNoReport   = "no_report"   // a resolution of a report the conversation does not have
)

// Limits of the changes of a message, applied at the log position.
const (
	// EditWindow is how long after its send a message may be edited.
	EditWindow = 48 * time.Hour
	// MaxDistinctReactions bounds the distinct emoji on one message.
	MaxDistinctReactions = 20
)
