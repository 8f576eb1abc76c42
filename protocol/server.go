package protocol

// The server API's bodies and answers (docs/protocol.md, "Server API").
// A server API write creates a conversation with CreateConversation's
// body and answers ConversationCreated, sets a record with SetRecord's,
// and answers a message with Message: the shapes a user's calls use.

// ServerMembers is the body of POST /v1/server/conversations/{cid}/members
// and .../members/remove: 1..1000 distinct user ids.
type ServerMembers struct {
	UserIDs []int64 `json:"user_ids"`
}

// ServerSend is the body of POST /v1/server/conversations/{cid}/messages:
// exactly one of AsUser (the message is that member's, sent for it) and
// SenderName (a named system or bot sender: the message's sender_id is 0
// and its sender_name this).
type ServerSend struct {
	AsUser     int64   `json:"as_user,omitempty"`
	SenderName string  `json:"sender_name,omitempty"`
	Body       string  `json:"body"`
	ReplyTo    int64   `json:"reply_to,omitempty"`
	Mentions   []int64 `json:"mentions,omitempty"`
	MentionAll bool    `json:"mention_all,omitempty"`
}

// ServerInbox is the answer of GET /v1/server/users/{uid}/inbox: the head
// of the user's inbox (what its sync's head says) and its floor (entries
// at or below it are pruned). A user of no conversation has head 0.
type ServerInbox struct {
	UserID int64 `json:"user_id"`
	Head   int64 `json:"head"`
	Floor  int64 `json:"floor"`
}

// The modes of a conversation (docs/large-conversations.md).
const (
	ModeWrite = "write" // an inbox entry per member per message
	ModeRead  = "read"  // read fan-out
)

// ServerConversation is the answer of GET /v1/server/conversations/{cid}.
type ServerConversation struct {
	ConversationID int64  `json:"conversation_id"`
	Title          string `json:"title"`
	LastSeq        int64  `json:"last_seq"`
	MemberCount    int64  `json:"member_count"`
	Mode           string `json:"mode"`
	Channel        bool   `json:"channel"`
	// Frozen and SlowMode are its settings (docs/protocol.md, "Frozen
	// and slow mode").
	Frozen   bool `json:"frozen"`
	SlowMode int  `json:"slow_mode"`
}
