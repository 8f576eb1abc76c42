package client

import (
	"encoding/json"
	"time"
)

// The objects of PROTOCOL.md as the client decodes them. Unknown fields are
// ignored: the server may add fields, never change these.

// Entry kinds.
const (
	KindMessage = "message"
	KindRecord  = "record"
)

// Message is a message of a conversation. Body is a JSON string for kind
// "text" and a JSON object (such as {"event":"member.added","user_id":7})
// for kind "system".
type Message struct {
	ConversationID int64           `json:"conversation_id"`
	Seq            int64           `json:"seq"`
	MsgID          string          `json:"msg_id"`
	SenderID       int64           `json:"sender_id"`
	Kind           string          `json:"kind"`
	Body           json.RawMessage `json:"body"`
	CreatedAt      time.Time       `json:"created_at"`
}

// Text returns the body of a text message, or the raw JSON of a system
// message's body.
func (m *Message) Text() string {
	var s string
	if json.Unmarshal(m.Body, &s) == nil {
		return s
	}
	return string(m.Body)
}

// Record is one user's view of one conversation. Versions only grow: keep
// the highest seen.
type Record struct {
	ConversationID int64    `json:"conversation_id"`
	Title          string   `json:"title"`
	Pinned         bool     `json:"pinned"`
	Muted          bool     `json:"muted"`
	ReadSeq        int64    `json:"read_seq"`
	LastSeq        int64    `json:"last_seq"`
	LastMessage    *Message `json:"last_message"`
	Version        int64    `json:"version"`
	Removed        bool     `json:"removed"`
}

// Entry is an inbox entry: a message (Kind KindMessage, Message set) or a
// changed record (Kind KindRecord, Record set).
type Entry struct {
	InboxSeq       int64    `json:"inbox_seq"`
	ConversationID int64    `json:"conversation_id"`
	Kind           string   `json:"kind"`
	Message        *Message `json:"message,omitempty"`
	Record         *Record  `json:"record,omitempty"`
}

// TooLong is what the client learnt when the server answered too_long: the
// cursor jumped from (PreviousEpoch, PreviousCursor) to (Epoch, Head), the
// entries in between will never be delivered, and the conversation list was
// read again. NewHoles are the history ranges this opened, per
// conversation; fill them with Client.Backfill.
type TooLong struct {
	PreviousEpoch, PreviousCursor int64
	Epoch, Head                   int64
	Conversations                 []Record
	NewHoles                      map[int64][]Hole
}

// SendResult is the end of a queued send: the message with its seq, or the
// permanent error that refused it (Err, an *APIError with Status 400, 403,
// 404 or 413). Exactly one of Message and Err is set.
type SendResult struct {
	MsgID          string
	ConversationID int64
	Message        *Message
	Err            error
}

// syncAnswer is a sync answer of HTTP (GET /v1/sync) and, for its fields,
// of the WebSocket entries and too_long frames.
type syncAnswer struct {
	TooLong       bool     `json:"too_long"`
	Epoch         int64    `json:"epoch"`
	Head          int64    `json:"head"`
	Entries       []Entry  `json:"entries"`
	HasMore       bool     `json:"has_more"`
	RecordVersion int64    `json:"record_version"`
	Conversations []Record `json:"conversations"`
	NextPage      *string  `json:"next_page"`
	Polling       *struct {
		NextIntervalMS int64 `json:"next_interval_ms"`
	} `json:"_polling"`
}

// listAnswer is GET /v1/conversations.
type listAnswer struct {
	Epoch         int64    `json:"epoch"`
	InboxHead     int64    `json:"inbox_head"`
	RecordVersion int64    `json:"record_version"`
	Conversations []Record `json:"conversations"`
	NextPage      *string  `json:"next_page"`
}

// historyAnswer is GET /v1/conversations/{cid}/messages.
type historyAnswer struct {
	Messages []Message `json:"messages"`
	HasMore  bool      `json:"has_more"`
}
