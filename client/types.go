package client

import "github.com/inboxd/inboxd/protocol"

// The objects of docs/protocol.md under the SDK's names. They are declared once,
// in package protocol (shared with the gateway); unknown fields are ignored:
// the server may add fields, never change these.

// Entry kinds.
const (
	KindMessage = protocol.KindMessage
	KindRecord  = protocol.KindRecord
	// KindUpdate is a changed message (edited, deleted, reacted to):
	// Entry.Message is its state when the entry was read, Version says
	// which change it includes. Handler.OnUpdate receives the new ones.
	KindUpdate = protocol.KindUpdate
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

// Reaction is the count of one emoji on a message, and whether the user
// is one of them (protocol.Reaction).
type Reaction = protocol.Reaction

// Record is one user's view of one conversation (protocol.Record).
// Versions only grow: keep the highest seen.
type Record = protocol.Record

// Entry is an inbox entry (protocol.Entry): a message (Kind KindMessage,
// Message set), a changed record (Kind KindRecord, Record set) or a changed
// message (Kind KindUpdate, Message set to its state). Kinds added later
// are passed to OnEntry as they come and otherwise skipped.
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
	// Stale are, per conversation, the messages delivered before the jump:
	// their changes (update entries) may have been skipped. Backfill reads
	// them again after the holes above and hands the changed ones to
	// Handler.OnUpdate.
	Stale map[int64][]Hole
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
