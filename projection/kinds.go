package projection

// Inbox entry kinds as stored in inbox.kind.
const (
	KindMessage = 1
	KindRecord  = 2
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
)
