package client

import "github.com/inboxd/inboxd/protocol"

// The objects of docs/protocol.md under the SDK's names. They are declared once,
// in package protocol (shared with the gateway); unknown fields are ignored:
// the server may add fields, never change these.

// Entry kinds.
const (
	KindMessage = protocol.KindMessage
	KindRecord  = protocol.KindRecord
)

// Message kinds (Message.Kind): a message a user sent, or one the server
// made of a membership event.
const (
	MessageText   = protocol.MessageText
	MessageSystem = protocol.MessageSystem
)

// Message is a message of a conversation (protocol.Message). Body is a JSON
// string for kind "text" and a JSON object (such as
// {"event":"member.added","user_id":7}) for kind "system"; Text returns the
// text of either.
type Message = protocol.Message

// Record is one user's view of one conversation (protocol.Record).
// Versions only grow: keep the highest seen.
type Record = protocol.Record

// Entry is an inbox entry (protocol.Entry): a message (Kind KindMessage,
// Message set) or a changed record (Kind KindRecord, Record set).
type Entry = protocol.Entry

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
