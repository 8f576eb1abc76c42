package protocol

import (
	"encoding/json"
	"time"
)

// Entry kinds (Entry.Kind).
const (
	KindMessage = "message"
	KindRecord  = "record"
	// KindUpdate: a message changed (edited, deleted, reacted to). Message
	// is its state when read; Version says which change it includes.
	KindUpdate = "update"
)

// Message kinds (Message.Kind).
const (
	// MessageText is a message a user sent; its Body is a JSON string.
	MessageText = "text"
	// MessageSystem is a message the server made of a membership event; its
	// Body is a JSON object such as {"event":"member.added","user_id":7,"by":1}.
	MessageSystem = "system"
)

// Message is a message of a conversation. Seq is its position in the
// conversation, 1..last without holes. Body is a JSON string for kind
// "text" and a JSON object for kind "system"; it stays raw so that neither
// side re-encodes it. CreatedAt is the time of the event, in UTC.
type Message struct {
	ConversationID int64           `json:"conversation_id"`
	Seq            int64           `json:"seq"`
	MsgID          string          `json:"msg_id"`
	SenderID       int64           `json:"sender_id"`
	Kind           string          `json:"kind"`
	Body           json.RawMessage `json:"body"`
	CreatedAt      time.Time       `json:"created_at"`

	// The changes of a message (docs/protocol.md, "Changing a message").
	// Version grows with every change; absent means 1 (never changed).
	// EditedAt is the time of the last edit. A deleted message keeps its
	// seq; its body is "" and it has no reactions. ReplyTo is the seq this
	// message answers. Reactions are counts per emoji, with Me set on the
	// reader's own.
	Version   int64      `json:"version,omitempty"`
	EditedAt  *time.Time `json:"edited_at,omitempty"`
	Deleted   bool       `json:"deleted,omitempty"`
	ReplyTo   int64      `json:"reply_to,omitempty"`
	Reactions []Reaction `json:"reactions,omitempty"`

	// Mentions are the users the message mentions, as its sender named
	// them; MentionAll mentions every member ("@all").
	Mentions   []int64 `json:"mentions,omitempty"`
	MentionAll bool    `json:"mention_all,omitempty"`

	// ChangedOrd is, in a read-mode conversation, the change count its
	// last change set (docs/large-conversations.md): what ?changed_after
	// orders by. Absent when 0 (never changed in read mode).
	ChangedOrd int64 `json:"changed_ord,omitempty"`

	// SenderName is set on a message a back-end service sent as a named
	// system or bot sender (docs/protocol.md, "Server API"): its SenderID
	// is 0, no user. Absent on every user's message.
	SenderName string `json:"sender_name,omitempty"`

	// Attachments are the files the message attaches (docs/protocol.md,
	// "Attachments"); absent when none, and on a deleted message.
	Attachments []Attachment `json:"attachments,omitempty"`

	// SenderBlocked says that the reader blocks the message's sender
	// (docs/protocol.md, "Blocks"): the entry keeps its place, but its
	// body is "" and its attachments and mentions are left out. Judged
	// when read, by the reader's blocks then.
	SenderBlocked bool `json:"sender_blocked,omitempty"`
}

// Blocked returns a copy of m as a reader who blocks its sender sees it
// (SenderBlocked): only where it stands, who sent it and when remain.
func (m *Message) Blocked() Message {
	out := *m
	out.SenderBlocked = true
	out.Body = json.RawMessage(`""`)
	out.Attachments, out.Mentions, out.MentionAll = nil, nil, false
	return out
}

// Attachment is a file a message attaches: uploaded sealed to the object
// store (protocol/sealed), downloaded with GET
// /v1/conversations/{cid}/attachments/{id} and opened with Key.
type Attachment struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	ContentType string `json:"content_type"`
	// Size is the file's size; its sealed size in the store is
	// sealed.Size(Size).
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	Width  int    `json:"width,omitempty"`
	Height int    `json:"height,omitempty"`
	// Key opens the stored object: 32 bytes, unpadded base64url.
	Key string `json:"key"`
	// Thumbnail, on an image, once a gateway made it (an update entry of
	// the message announces it): a JPEG, downloaded with ?thumbnail=true
	// and opened with sealed.ThumbnailKey(Key).
	Thumbnail *Thumbnail `json:"thumbnail,omitempty"`
}

// Thumbnail describes the thumbnail of an attached image.
type Thumbnail struct {
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
	Width       int    `json:"width"`
	Height      int    `json:"height"`
}

// LargeConv is a read-mode conversation the user is a current member of,
// as the large lists of sync answers and frames carry it: its last seq and
// change count (docs/large-conversations.md).
type LargeConv struct {
	ConversationID int64 `json:"conversation_id"`
	LastSeq        int64 `json:"last_seq"`
	ChangeCount    int64 `json:"change_count"`
}

// Reaction is the count of one emoji on a message, and whether the reader
// is one of them.
type Reaction struct {
	Emoji string `json:"emoji"`
	Count int64  `json:"count"`
	Me    bool   `json:"me,omitempty"`
}

// CurrentVersion is the message's version, 1 when absent.
func (m *Message) CurrentVersion() int64 { return max(m.Version, 1) }

// Text returns the body of a text message, or the raw JSON of a system
// message's body.
func (m *Message) Text() string {
	var s string
	if json.Unmarshal(m.Body, &s) == nil {
		return s
	}
	return string(m.Body)
}

// Record is one user's view of one conversation. For a removed record
// (Removed true), LastSeq and LastMessage stop at the user's removal.
// Version grows with every change of any of the user's records: keep the
// highest seen. LastMessage is null for a conversation without a message
// the user may see.
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
	// UnreadCount is the number of text messages by others after ReadSeq
	// that the user can see, deleted ones not counted; MentionCount those
	// of them that mention the user (or @all). Both are 0 for a removed
	// record. Counted when read (docs/protocol.md, "Unread and mention
	// counts").
	UnreadCount  int64 `json:"unread_count"`
	MentionCount int64 `json:"mention_count"`
	// Frozen and SlowMode are the conversation's settings
	// (docs/protocol.md, "Frozen and slow mode"); Role is the user's role
	// in it, absent once removed.
	Frozen   bool   `json:"frozen"`
	SlowMode int    `json:"slow_mode"`
	Role     string `json:"role,omitempty"`
}

// Counts are the user's totals over its records at the answer's head:
// UnreadTotal sums the unread counts of records that are not muted,
// MentionTotal the mention counts of all of them (a mention counts in a
// muted conversation too).
type Counts struct {
	UnreadTotal  int64 `json:"unread_total"`
	MentionTotal int64 `json:"mention_total"`
}

// Receipt is a member's read position in a conversation.
type Receipt struct {
	UserID  int64 `json:"user_id"`
	ReadSeq int64 `json:"read_seq"`
}

// Entry is an inbox entry: a message (Kind KindMessage, Message set), a
// changed record (Kind KindRecord, Record set) or a changed message (Kind
// KindUpdate, Message set to its state when read). A record entry carries the
// record as it is when read, with its current version. The gateway writes
// entries with AppendEntry; this type is their decoded form.
type Entry struct {
	InboxSeq       int64    `json:"inbox_seq"`
	ConversationID int64    `json:"conversation_id"`
	Kind           string   `json:"kind"`
	Message        *Message `json:"message,omitempty"`
	Record         *Record  `json:"record,omitempty"`
}
