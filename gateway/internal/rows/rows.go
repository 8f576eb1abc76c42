// Package rows is how the protocol's objects (package protocol) are read
// from the projections: the columns of a message and a record, and the
// scanners that turn a row into a *protocol.Message or *protocol.Record.
// The inbox reader, the sends, history and the conversation list share it.
package rows

import (
	"encoding/json"

	"sort"
	"time"

	"github.com/inboxd/inboxd/projection"

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
// Its last column is the reader's own reaction: NULL here (a read shared
// by many readers sets Me afterwards); MessageColsFor reads it.
const MessageCols = messageCols + `, NULL::text`

const messageCols = `m.conversation_id, m.seq, m.msg_id::text, m.sender_id, m.kind, m.body, m.created_at,
	m.version, m.edited_at, m.deleted, m.reply_to, m.reactions, m.mentions, m.mention_all, m.changed_ord, m.sender_name,
	m.attachments`

// MessageColsFor is MessageCols with the reaction of the user the SQL
// expression user names (a parameter such as "$2"), so that Me is set.
func MessageColsFor(user string) string { return messageCols + `, ` + mineOf("m", user) }

// mineOf is the reaction of user on the message aliased m.
func mineOf(m, user string) string {
	return `(SELECT rr.emoji FROM reactions rr WHERE rr.conversation_id = ` + m + `.conversation_id AND rr.seq = ` +
		m + `.seq AND rr.user_id = ` + user + `)`
}

// MessageScan reads a possibly absent message (a LEFT JOIN).
type MessageScan struct {
	conv, seq, sender, version, replyTo *int64
	msgID, kind, body                   *string
	at, editedAt                        *time.Time
	deleted                             *bool
	reactions                           map[string]int64
	mentions                            []int64
	mentionAll                          *bool
	changedOrd                          *int64
	senderName                          *string
	attachments                         []protocol.Attachment
	mine                                *string
}

// Targets are the scan targets of MessageCols.
func (s *MessageScan) Targets() []any {
	return []any{&s.conv, &s.seq, &s.msgID, &s.sender, &s.kind, &s.body, &s.at,
		&s.version, &s.editedAt, &s.deleted, &s.replyTo, &s.reactions, &s.mentions, &s.mentionAll, &s.changedOrd, &s.senderName, &s.attachments, &s.mine}
}

// Message is the scanned message, nil when the row had none. Its
// reactions have no Me set: that is the reader's (see SetMine).
func (s *MessageScan) Message() *protocol.Message {
	if s.msgID == nil || s.conv == nil {
		return nil
	}
	m := &protocol.Message{ConversationID: *s.conv, Seq: *s.seq, MsgID: *s.msgID, SenderID: *s.sender,
		Kind: *s.kind, Body: MessageBody(*s.kind, *s.body), CreatedAt: s.at.UTC()}
	if s.version != nil && *s.version > 1 {
		m.Version = *s.version
	}
	if s.editedAt != nil {
		t := s.editedAt.UTC()
		m.EditedAt = &t
	}
	if s.deleted != nil && *s.deleted {
		m.Deleted = true
	}
	if s.replyTo != nil {
		m.ReplyTo = *s.replyTo
	}
	m.Reactions = Reactions(s.reactions)
	if len(s.mentions) > 0 {
		m.Mentions = s.mentions
	}
	m.MentionAll = s.mentionAll != nil && *s.mentionAll
	if s.changedOrd != nil && *s.changedOrd > 0 {
		m.ChangedOrd = *s.changedOrd
	}
	if s.senderName != nil {
		m.SenderName = *s.senderName
	}
	if len(s.attachments) > 0 && !m.Deleted {
		m.Attachments = s.attachments
	}
	if s.mine != nil {
		for i := range m.Reactions {
			m.Reactions[i].Me = m.Reactions[i].Emoji == *s.mine
		}
	}
	return m
}

// Reactions turns stored counts into the wire's list: most first, then
// by emoji. Nil when there is none.
func Reactions(counts map[string]int64) []protocol.Reaction {
	if len(counts) == 0 {
		return nil
	}
	out := make([]protocol.Reaction, 0, len(counts))
	for e, n := range counts {
		if n > 0 {
			out = append(out, protocol.Reaction{Emoji: e, Count: n})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Count > out[j].Count || out[i].Count == out[j].Count && out[i].Emoji < out[j].Emoji
	})
	return out
}

// SetMine returns m with Me set on the reader's reaction (emoji), copying
// the reactions so that a shared message stays as it was.
func SetMine(m *protocol.Message, emoji string) *protocol.Message {
	c := *m
	c.Reactions = append([]protocol.Reaction(nil), m.Reactions...)
	for i := range c.Reactions {
		c.Reactions[i].Me = c.Reactions[i].Emoji == emoji
	}
	return &c
}

// RecordJoins turns a records row aliased r into a record: the
// conversation (title, last seq) and the last message visible to the user.
// A removed user's last seq is its last removal (the end of its latest span).
// Used with LEFT JOINs so that it also serves rows without a record.
var RecordJoins = `
LEFT JOIN conversations c ON c.id = r.conversation_id
LEFT JOIN LATERAL (SELECT CASE WHEN r.removed THEN COALESCE((SELECT max(s.left_seq) FROM member_spans s
	WHERE s.conversation_id = r.conversation_id AND s.user_id = r.user_id), 0) ELSE c.last_seq END AS last_seq) ls ON true
LEFT JOIN messages lm ON lm.conversation_id = r.conversation_id AND lm.seq = ls.last_seq`

// SQLRecordBases reads the user's side of records by (user,
// conversation), on the user's server of a sharded placement, with the
// epoch of the snapshot: what the user sets (pinned, muted), its read
// position, whether it was removed, and the version. $1 users, $2
// conversations.
const SQLRecordBases = `SELECT (SELECT epoch FROM meta), r.user_id, r.conversation_id, r.pinned, r.muted, r.read_seq, r.version, r.removed
FROM unnest($1::bigint[], $2::bigint[]) AS k(user_id, conversation_id)
JOIN records r ON r.user_id = k.user_id AND r.conversation_id = k.conversation_id`

// SQLRecordsGiven reads, on the conversation's server, the records whose
// user's side ($1 users, $2 conversations, $3 pinned, $4 muted, $5
// read_seq, $6 version, $7 removed: SQLRecordBases's columns) was read on
// the user's: the title, the last seq, the last message and the counts
// come from the conversation's server, the rest from the user's, so a
// record reads as on one server. Columns: the epoch, the user, RecordCols.
var SQLRecordsGiven = `SELECT (SELECT epoch FROM meta), r.user_id, ` + RecordCols + `
FROM unnest($1::bigint[], $2::bigint[], $3::bool[], $4::bool[], $5::bigint[], $6::bigint[], $7::bool[])
	AS r(user_id, conversation_id, pinned, muted, read_seq, version, removed)` + RecordJoins

// RecordCols are the columns RecordScan reads.
// The aliases keep the names unique when wrapped in a subquery.
var RecordCols = `r.conversation_id, c.title, r.pinned, r.muted, r.read_seq, ls.last_seq, r.version, r.removed,
c.frozen AS c_frozen, c.slow_mode AS c_slow_mode,
(SELECT rs.role FROM member_spans rs WHERE rs.conversation_id = r.conversation_id AND rs.user_id = r.user_id AND rs.left_seq IS NULL) AS r_role,
lm.conversation_id AS lm_conversation_id, lm.seq AS lm_seq, lm.msg_id::text AS lm_msg_id, lm.sender_id AS lm_sender_id,
lm.kind AS lm_kind, lm.body AS lm_body, lm.created_at AS lm_created_at,
lm.version AS lm_version, lm.edited_at AS lm_edited_at, lm.deleted AS lm_deleted, lm.reply_to AS lm_reply_to,
lm.reactions AS lm_reactions, lm.mentions AS lm_mentions, lm.mention_all AS lm_mention_all, lm.changed_ord AS lm_changed_ord, lm.sender_name AS lm_sender_name, lm.attachments AS lm_attachments, ` + "(SELECT rr.emoji FROM reactions rr WHERE rr.conversation_id = lm.conversation_id AND rr.seq = lm.seq AND rr.user_id = r.user_id)" + ` AS lm_mine,
` + projection.CountsOf("r", "ls.last_seq", "lm.ord")

// RecordScan reads a possibly absent record.
type RecordScan struct {
	conv, readSeq, lastSeq, version *int64
	unread, mentions                *int64
	title                           *string
	pinned, muted, removed          *bool
	// The conversation's settings and the user's role (nil: no member).
	frozen   *bool
	slowMode *int32
	role     *string
	last     MessageScan
}

// Targets are the scan targets of RecordCols.
func (s *RecordScan) Targets() []any {
	t := append([]any{&s.conv, &s.title, &s.pinned, &s.muted, &s.readSeq, &s.lastSeq, &s.version, &s.removed,
		&s.frozen, &s.slowMode, &s.role}, s.last.Targets()...)
	return append(t, &s.unread, &s.mentions)
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
	if s.unread != nil {
		r.UnreadCount = *s.unread
	}
	if s.frozen != nil {
		r.Frozen = *s.frozen
	}
	if s.slowMode != nil {
		r.SlowMode = int(*s.slowMode)
	}
	if s.role != nil && !r.Removed {
		r.Role = *s.role
	}
	if s.mentions != nil {
		r.MentionCount = *s.mentions
	}
	return r
}
