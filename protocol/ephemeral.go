package protocol

import "time"

// Typing, presence and the user's settings (docs/websocket.md, "Typing and
// presence"; docs/protocol.md, "Settings" and "Presence"). None of it is
// in the log or the inbox.

// Frame types of typing and presence. FrameTyping goes both ways: the
// client's Typing, the server's TypingEvent. FramePresence is server to
// client.
const (
	FrameTyping   = "typing"
	FramePresence = "presence"
)

// Typing states. A typing frame without a state starts (or continues)
// typing; TypingStop ends it before it expires.
const (
	TypingStart = "start"
	TypingStop  = "stop"
)

// Typing says that the user types in a conversation (client to server).
// Send it while the user types, at most every couple of seconds; the
// server drops what comes faster (docs/websocket.md).
type Typing struct {
	Type           string `json:"type"` // FrameTyping
	ConversationID int64  `json:"conversation_id"`
	State          string `json:"state,omitempty"` // TypingStart (or empty) or TypingStop
}

// TypingEvent is another member typing in a conversation (server to
// client): State TypingStart, to be shown for ExpiresInMS unless a newer
// frame comes, or TypingStop (ExpiresInMS 0): no longer.
type TypingEvent struct {
	Type           string `json:"type"` // FrameTyping
	ConversationID int64  `json:"conversation_id"`
	UserID         int64  `json:"user_id"`
	State          string `json:"state"`
	ExpiresInMS    int64  `json:"expires_in_ms"`
}

// Presence is a user's presence as the asker may see it: Online, or
// offline since LastSeen (absent when unknown, or hidden by the user).
type Presence struct {
	UserID   int64      `json:"user_id"`
	Online   bool       `json:"online"`
	LastSeen *time.Time `json:"last_seen,omitempty"`
}

// PresenceFrame is a change of a user's presence (server to client), sent
// to the users who share a conversation with them.
type PresenceFrame struct {
	Type string `json:"type"` // FramePresence
	Presence
}

// PresenceList answers GET /v1/presence: the users asked about that the
// asker may see (sharing a current conversation, or the asker), by user id.
type PresenceList struct {
	Presence []Presence `json:"presence"`
}

// Settings are a user's own settings (GET and PATCH /v1/settings).
type Settings struct {
	// HideReceipts: the user's read positions are not shown to others.
	HideReceipts bool `json:"hide_receipts"`
	// HidePresence: the user appears offline, without a last seen, to
	// others.
	HidePresence bool `json:"hide_presence"`
	// Notifications: the user gets push notifications of messages while
	// not connected (docs/notifications.md). On by default.
	Notifications bool `json:"notifications"`
}

// DefaultSettings are the settings of a user who never changed them.
func DefaultSettings() Settings { return Settings{Notifications: true} }

// SettingsPatch is the body of PATCH /v1/settings: absent or null fields
// stay as they are; at least one must be given.
type SettingsPatch struct {
	HideReceipts  *bool `json:"hide_receipts"`
	HidePresence  *bool `json:"hide_presence"`
	Notifications *bool `json:"notifications"`
}
