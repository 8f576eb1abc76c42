// Package rows is how the protocol's objects (package protocol) are read
// from the projections: the columns of a message and a record, and the
// scanners that turn a row into a *protocol.Message or *protocol.Record.
// The inbox reader, the sends, history and the conversation list share it.
package rows

import (
	"encoding/json"
	"time"

	"github.com/inboxd/inboxd/protocol"
)

// MessageBody is the wire form of a stored body: a system message's body is
// the JSON object the projector wrote, a text body becomes a JSON string.
func MessageBody(kind, body string) json.RawMessage {
	if kind == protocol.MessageSystem && json.Valid([]byte(body)) {
		return json.RawMessage(body)
	}
	raw, _ := json.Marshal(body)
	return raw
}

// MessageCols are the columns of a message aliased m, as MessageScan reads them.
const MessageCols = `m.conversation_id, m.seq, m.msg_id::text, m.sender_id, m.kind, m.body, m.created_at`

// MessageScan reads a possibly absent message (a LEFT JOIN).
type MessageScan struct {
	conv, seq, sender *int64
	msgID, kind, body *string
	at                *time.Time
}

// Targets are the scan targets of MessageCols.
func (s *MessageScan) Targets() []any {
	return []any{&s.conv, &s.seq, &s.msgID, &s.sender, &s.kind, &s.body, &s.at}
}

// Message is the scanned message, nil when the row had none.
func (s *MessageScan) Message() *protocol.Message {
	if s.msgID == nil || s.conv == nil {
		return nil
	}
	return &protocol.Message{ConversationID: *s.conv, Seq: *s.seq, MsgID: *s.msgID, SenderID: *s.sender,
		Kind: *s.kind, Body: MessageBody(*s.kind, *s.body), CreatedAt: s.at.UTC()}
}

// RecordJoins turns a records row aliased r into a record: the
// conversation (title, last seq) and the last message visible to the user.
// A removed user's last seq is its last removal (the end of its latest span).
// Used with LEFT JOINs so that it also serves rows without a record.
const RecordJoins = `
LEFT JOIN conversations c ON c.id = r.conversation_id
LEFT JOIN LATERAL (SELECT CASE WHEN r.removed THEN COALESCE((SELECT max(s.left_seq) FROM member_spans s
	WHERE s.conversation_id = r.conversation_id AND s.user_id = r.user_id), 0) ELSE c.last_seq END AS last_seq) ls ON true
LEFT JOIN messages lm ON lm.conversation_id = r.conversation_id AND lm.seq = ls.last_seq`

// RecordCols are the columns RecordScan reads.
// The aliases keep the names unique when wrapped in a subquery.
const RecordCols = `r.conversation_id, c.title, r.pinned, r.muted, r.read_seq, ls.last_seq, r.version, r.removed,
lm.conversation_id AS lm_conversation_id, lm.seq AS lm_seq, lm.msg_id::text AS lm_msg_id, lm.sender_id AS lm_sender_id,
lm.kind AS lm_kind, lm.body AS lm_body, lm.created_at AS lm_created_at`

// RecordScan reads a possibly absent record.
type RecordScan struct {
	conv, readSeq, lastSeq, version *int64
	title                           *string
	pinned, muted, removed          *bool
	last                            MessageScan
}

// Targets are the scan targets of RecordCols.
func (s *RecordScan) Targets() []any {
	return append([]any{&s.conv, &s.title, &s.pinned, &s.muted, &s.readSeq, &s.lastSeq, &s.version, &s.removed},
		s.last.Targets()...)
}

// Record is the scanned record, nil when the row had none.
func (s *RecordScan) Record() *protocol.Record {
	if s.conv == nil || s.version == nil {
		return nil
	}
	r := &protocol.Record{ConversationID: *s.conv, Pinned: *s.pinned, Muted: *s.muted, ReadSeq: *s.readSeq,
		Version: *s.version, Removed: *s.removed, LastMessage: s.last.Message()}
	if s.title != nil {
		r.Title = *s.title
	}
	if s.lastSeq != nil {
		r.LastSeq = *s.lastSeq
	}
	return r
}
