// Package events is the schema of the records on the inboxd.events topic: a
// versioned JSON envelope, one event per record, keyed by conversation id,
// with the event type repeated in the "type" record header so consumers can
// filter without decoding. It owns encoding and validation; it must not know
// about PostgreSQL or Kafka clients. docs/events.md documents it for outside
// consumers.
package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

// DefaultTopic is the topic of the events: what the producer appends to
// and every consumer (fanout, replay, analytics) reads by default. Its
// dead-letter queue is DefaultTopic+".dlq".
const DefaultTopic = "inboxd.events"

// Version is the envelope version this package writes and accepts.
const Version = 1

// HeaderType is the record header that repeats the event type.
const HeaderType = "type"

// DefaultMaxBody is the default limit of a message body in bytes.
const DefaultMaxBody = 4096

// Event types.
const (
	ConversationCreated = "conversation.created"
	MemberAdded         = "member.added"
	MemberRemoved       = "member.removed"
	MessageSent         = "message.sent"
	RecordUpdated       = "record.updated"
	ReadUpdated         = "read.updated"
	MessageEdited       = "message.edited"
	MessageDeleted      = "message.deleted"
	// MessageThumbnailed announces the thumbnail of an image a message
	// attaches (attachments.go): appended by a gateway's thumbnail worker,
	// as a change of the sender's message.
	MessageThumbnailed = "message.thumbnailed"
	ReactionAdded      = "reaction.added"
	ReactionRemoved    = "reaction.removed"
	// MessageReported is a member's report of a message to the
	// moderators, and ReportResolved a service's resolution of one
	// (reports.go): neither changes the message or any inbox.
	MessageReported = "message.reported"
	ReportResolved  = "report.resolved"
	// MemberRoleSet sets a member's role in its conversation (UserID,
	// Role): see Roles and docs/protocol.md, "Roles".
	MemberRoleSet = "member.role_set"
	// MemberBanned bans UserID from the conversation (removing it if it
	// is a member) until Until (absent: until MemberUnbanned), and
	// MemberMuted keeps a member from sending, editing and reacting until
	// Until (absent: until MemberUnmuted): docs/protocol.md, "Ban and mute".
	MemberBanned   = "member.banned"
	MemberUnbanned = "member.unbanned"
	MemberMuted    = "member.muted"
	MemberUnmuted  = "member.unmuted"
	// UserBlocked records that ActorID (the blocker) blocks UserID, and
	// UserUnblocked that it no longer does: docs/protocol.md, "Blocks".
	// They are user-level events (UserLevel): no conversation, keyed by
	// the blocker, so that they land on the blocker's partition and are
	// projected on the blocker's server.
	UserBlocked   = "user.blocked"
	UserUnblocked = "user.unblocked"
	// ConversationUpdated changes a conversation's settings: any of
	// Title (a rename), Frozen and SlowMode; only those present change
	// (docs/protocol.md, "Frozen and slow mode").
	ConversationUpdated = "conversation.updated"
)

// MaxTitle bounds a conversation's title in bytes.
const MaxTitle = 256

// MaxSlowMode bounds a conversation's slow mode in seconds (six hours).
const MaxSlowMode = 21600

// UserLevel says whether events of type typ belong to a user rather than
// a conversation: their conversation_id is 0 and their record key is the
// actor's id (PartitionKey). The partition of a decimal id is the same on
// the event topic and the user-keyed topic, so such an event is projected
// on the server that holds its actor's state.
func UserLevel(typ string) bool {
	return typ == UserBlocked || typ == UserUnblocked
}

// PartitionKey is the id e's record is keyed by: its conversation, or
// its actor for a user-level event.
func (e *Event) PartitionKey() int64 {
	if UserLevel(e.Type) {
		return e.ActorID
	}
	return e.ConversationID
}

// The roles of a conversation's members, highest first. A conversation
// has at most one owner; a member without another role is a member.
const (
	RoleOwner     = "owner"
	RoleAdmin     = "admin"
	RoleModerator = "moderator"
	RoleMember    = "member"
)

// Roles are the roles a member.role_set may set, highest first.
var Roles = []string{RoleOwner, RoleAdmin, RoleModerator, RoleMember}

// ValidRole says whether role is one of Roles.
func ValidRole(role string) bool {
	for _, r := range Roles {
		if r == role {
			return true
		}
	}
	return false
}

// MaxEmoji bounds a reaction's emoji in bytes (one emoji with its
// modifiers and joiners, or a short :name:).
const MaxEmoji = 64

// MaxMembers bounds the member list of a created event.
const MaxMembers = 10000

// MaxMentions bounds the users a message.sent names in Mentions.
const MaxMentions = 50

// Event is one change. Fields beyond the envelope are set per type:
// conversation.created: Title, Members, Channel, Roles; member.added/removed:
// UserID; member.role_set: UserID, Role; member.banned/muted: UserID,
// optionally Until; member.unbanned/unmuted: UserID; user.blocked and
// user.unblocked: UserID (the blocked user; no conversation);
// conversation.updated: any of Title, Frozen, SlowMode;
// message.sent: MsgID, Body, optionally ReplyTo; record.updated: Pinned
// and/or Muted; read.updated: ReadSeq. The changes of a message
// (message.edited: Body; message.deleted; reaction.added: Emoji;
// reaction.removed) name it by Seq and carry their own idempotency key,
// ChangeID.
type Event struct {
	V              int       `json:"v"`
	Type           string    `json:"type"`
	EventID        string    `json:"event_id"`
	ConversationID int64     `json:"conversation_id"`
	ActorID        int64     `json:"actor_id"`
	At             time.Time `json:"at"`

	Title   string  `json:"title,omitempty"`
	Members []int64 `json:"members,omitempty"`
	// Channel (conversation.created): the conversation is in read fan-out
	// from its first seq, whatever its size (docs/large-conversations.md).
	Channel bool `json:"channel,omitempty"`
	// Roles (conversation.created): members' roles limit who may add and
	// remove members and delete others' messages (docs/protocol.md,
	// "Roles"). A conversation created without it (before roles existed,
	// or by an import) keeps the earlier rules, so that a replay of an old
	// log projects what was projected live: any member adds and removes.
	Roles  bool  `json:"roles,omitempty"`
	UserID int64 `json:"user_id,omitempty"`
	// Role (member.role_set): the role UserID gets, one of Roles.
	Role string `json:"role,omitempty"`
	// Until (member.banned, member.muted): when the ban or mute lapses;
	// absent, it stands until lifted.
	Until   *time.Time `json:"until,omitempty"`
	MsgID   string     `json:"msg_id,omitempty"`
	Body    *string    `json:"body,omitempty"`
	Pinned  *bool      `json:"pinned,omitempty"`
	Muted   *bool      `json:"muted,omitempty"`
	ReadSeq *int64     `json:"read_seq,omitempty"`

	// Frozen (conversation.updated): freezes (true) or unfreezes the
	// conversation; SlowMode: the seconds a member below moderator waits
	// between its sends (0: off). Absent: unchanged. A rename is a
	// non-empty Title: the field is the creation's, whose empty value
	// cannot say "unchanged" apart from "no title".
	Frozen   *bool `json:"frozen,omitempty"`
	SlowMode *int  `json:"slow_mode,omitempty"`

	// SealedBody replaces Body when the gateway seals bodies (seal.go):
	// a message.sent or message.edited carries one of the two.
	SealedBody string `json:"sealed_body,omitempty"`

	ReplyTo int64 `json:"reply_to,omitempty"`
	// Mentions are the users a message.sent mentions (distinct, positive,
	// at most MaxMentions); MentionAll mentions every member ("@all").
	Mentions   []int64 `json:"mentions,omitempty"`
	MentionAll bool    `json:"mention_all,omitempty"`
	// Attachments (message.sent) are the files it attaches, described in
	// the clear where bodies are plain; SealedAttachments replaces them
	// where bodies are sealed (attachments.go). A message with
	// attachments may have an empty body.
	Attachments       []Attachment `json:"attachments,omitempty"`
	SealedAttachments string       `json:"sealed_attachments,omitempty"`
	// Thumbnail (message.thumbnailed) describes the thumbnail made of
	// one of the message's attachments.
	Thumbnail *ThumbnailOf `json:"thumbnail,omitempty"`

	Seq      int64  `json:"seq,omitempty"`
	ChangeID string `json:"change_id,omitempty"`
	Emoji    string `json:"emoji,omitempty"`

	// ReportID (message.reported, report.resolved) names a report: the
	// reporter's idempotency key. Reason is a report's (one of
	// ReportReasons), Resolution a resolution's (one of Resolutions);
	// Note is either's free text, at most MaxReportNote bytes.
	ReportID   string `json:"report_id,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Resolution string `json:"resolution,omitempty"`
	Note       string `json:"note,omitempty"`

	// Service (any type) names the server API key that made the event,
	// "<key id>:<key name>" (docs/protocol.md, "Server API"): the actor
	// is that service. With ActorID set the service acted for that user
	// (the projection applies the user's rules); with ActorID 0
	// (conversation.created, member.added, member.removed, member.role_set,
	// message.sent, report.resolved) it acted as itself: it is no member, needs none, and a message it
	// sends has sender_id 0 and SenderName. Absent on users' events.
	Service string `json:"service,omitempty"`
	// SenderName (message.sent with ActorID 0): the system or bot sender
	// the message shows, 1..MaxSenderName bytes.
	SenderName string `json:"sender_name,omitempty"`

	// ImportedAt marks an event appended by `inboxd import`
	// (docs/import.md): At is then the original time in the system the
	// history comes from, and ImportedAt the time of the import, which the
	// event's inbox entries carry (retention counts from it). Set on
	// conversation.created, member.added and message.sent; an imported
	// message takes a seq but no inbox entry, and an imported join is an
	// entry of its joiner only.
	ImportedAt *time.Time `json:"imported_at,omitempty"`
}

// MaxService bounds Event.Service in bytes.
const MaxService = 96

// MaxSenderName bounds Event.SenderName in bytes.
const MaxSenderName = 64

// Imported says whether e was appended by an import.
func (e *Event) Imported() bool { return e.ImportedAt != nil }

// ErrInvalid is wrapped by every validation failure of Decode and Validate.
var ErrInvalid = errors.New("invalid event")

// InvalidError says why an event was refused; Reason is short and stable
// enough to be used as a DLQ header.
type InvalidError struct {
	Reason string
}

func (e *InvalidError) Error() string { return "invalid event: " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

func invalid(format string, args ...any) error {
	return &InvalidError{Reason: fmt.Sprintf(format, args...)}
}

// Key is the record key of events of a conversation.
func Key(conversationID int64) []byte {
	return strconv.AppendInt(nil, conversationID, 10)
}

// Encode validates e and returns its JSON encoding.
func Encode(e *Event, maxBody int) ([]byte, error) {
	if err := e.Validate(maxBody); err != nil {
		return nil, err
	}
	return json.Marshal(e)
}

// Decode parses and validates one record value. Unknown fields are allowed
// (a newer writer may add fields within version 1); everything the type needs
// must be present and well formed.
func Decode(value []byte, maxBody int) (*Event, error) {
	if !utf8.Valid(value) {
		return nil, invalid("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	var e Event
	if err := dec.Decode(&e); err != nil {
		return nil, invalid("not a JSON event: %v", err)
	}
	if dec.More() {
		return nil, invalid("trailing data after the event")
	}
	if err := e.Validate(maxBody); err != nil {
		return nil, err
	}
	return &e, nil
}

// Validate checks the envelope and the fields the type requires. Text
// fields (title, body) must be text PostgreSQL can store: valid UTF-8
// without NUL (see docs/events.md); the ids are uuids.
func (e *Event) Validate(maxBody int) error {
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	if e.V != Version {
		return invalid("unsupported version %d", e.V)
	}
	if _, err := uuid.Parse(e.EventID); err != nil || len(e.EventID) != 36 {
		return invalid("event_id is not a uuid")
	}
	switch {
	case UserLevel(e.Type) && e.ConversationID != 0:
		return invalid("conversation_id on a %s", e.Type)
	case !UserLevel(e.Type) && e.ConversationID <= 0:
		return invalid("conversation_id must be positive")
	}
	if err := e.validateActor(); err != nil {
		return err
	}
	if e.At.IsZero() {
		return invalid("missing at")
	}
	if err := e.validateImported(); err != nil {
		return err
	}
	if e.Type != MessageSent && e.HasAttachments() {
		return invalid("attachments on a %s", e.Type)
	}
	if e.Type != MemberRoleSet && e.Role != "" {
		return invalid("role on a %s", e.Type)
	}
	if e.Type != MemberBanned && e.Type != MemberMuted && e.Until != nil {
		return invalid("until on a %s", e.Type)
	}
	if e.Type != ConversationUpdated && (e.Frozen != nil || e.SlowMode != nil) {
		return invalid("frozen or slow_mode on a %s", e.Type)
	}
	switch e.Type {
	case ConversationCreated:
		if err := validTitle(e.Title); err != nil {
			return err
		}
		if len(e.Members) > MaxMembers {
			return invalid("too many members")
		}
		for _, m := range e.Members {
			if m <= 0 {
				return invalid("member ids must be positive")
			}
		}
	case MemberAdded, MemberRemoved, MemberBanned, MemberUnbanned, MemberMuted, MemberUnmuted:
		if e.UserID <= 0 {
			return invalid("user_id must be positive")
		}
	case UserBlocked, UserUnblocked:
		if e.UserID <= 0 {
			return invalid("user_id must be positive")
		}
		if e.UserID == e.ActorID {
			return invalid("a user does not block itself")
		}
	case ConversationUpdated:
		if err := e.validateUpdate(); err != nil {
			return err
		}
	case MemberRoleSet:
		if e.UserID <= 0 {
			return invalid("user_id must be positive")
		}
		if !ValidRole(e.Role) {
			return invalid("role must be one of %s", strings.Join(Roles, ", "))
		}
	case MessageSent:
		if _, err := uuid.Parse(e.MsgID); err != nil || len(e.MsgID) != 36 {
			return invalid("msg_id is not a uuid")
		}
		if err := e.validateAttachmentFields(); err != nil {
			return err
		}
		if err := e.validateBody(maxBody); err != nil {
			return err
		}
		if e.ReplyTo < 0 {
			return invalid("reply_to must be a seq")
		}
		if err := validateMentions(e.Mentions); err != nil {
			return err
		}
	case MessageEdited, MessageDeleted, ReactionAdded, ReactionRemoved, MessageThumbnailed:
		return e.validateChange(maxBody)
	case MessageReported, ReportResolved:
		return e.validateReport()
	case RecordUpdated:
		if e.Pinned == nil && e.Muted == nil {
			return invalid("record.updated without pinned or muted")
		}
	case ReadUpdated:
		if e.ReadSeq == nil || *e.ReadSeq < 0 {
			return invalid("read_seq missing or negative")
		}
	case "":
		return invalid("missing type")
	default:
		return invalid("unknown type %q", e.Type)
	}
	return nil
}

// validateActor checks actor_id and what a service adds: actor_id is a
// user, or 0 for a service acting as itself on the types that allow it;
// sender_name only on a service's own message.sent.
func (e *Event) validateActor() error {
	if len(e.Service) > MaxService {
		return invalid("service over %d bytes", MaxService)
	}
	if err := storableText("service", e.Service); err != nil {
		return err
	}
	switch {
	case e.ActorID < 0:
		return invalid("actor_id must be positive")
	case e.ActorID == 0 && e.Service == "":
		return invalid("actor_id must be positive")
	case e.ActorID == 0 && !ServiceMayAct(e.Type):
		return invalid("actor_id 0 (a service) is not allowed on %s", e.Type)
	}
	own := e.ActorID == 0 && e.Type == MessageSent
	switch {
	case own && (e.SenderName == "" || len(e.SenderName) > MaxSenderName):
		return invalid("a service's message needs a sender_name of 1..%d bytes", MaxSenderName)
	case !own && e.SenderName != "":
		return invalid("sender_name is only for a service's own message")
	}
	return storableText("sender_name", e.SenderName)
}

// ServiceMayAct says whether a service may make an event of type typ as
// itself (actor_id 0). Records and read positions are a user's own, and
// a message's changes and reports are its sender's or a member's: those
// name the user. A report's resolution is only ever a service's.
func ServiceMayAct(typ string) bool {
	switch typ {
	case ConversationCreated, MemberAdded, MemberRemoved, MemberRoleSet, MemberBanned, MemberUnbanned,
		MemberMuted, MemberUnmuted, MessageSent, ReportResolved, ConversationUpdated:
		return true
	}
	return false
}

// validTitle checks a conversation's title: at most MaxTitle bytes of
// storable text.
func validTitle(title string) error {
	if len(title) > MaxTitle {
		return invalid("title over %d bytes", MaxTitle)
	}
	return storableText("title", title)
}

// validateUpdate checks a conversation.updated: at least one setting, a
// title as a creation's, a slow mode of 0..MaxSlowMode seconds.
func (e *Event) validateUpdate() error {
	if e.Title == "" && e.Frozen == nil && e.SlowMode == nil {
		return invalid("conversation.updated without title, frozen or slow_mode")
	}
	if err := validTitle(e.Title); err != nil {
		return err
	}
	if e.SlowMode != nil && (*e.SlowMode < 0 || *e.SlowMode > MaxSlowMode) {
		return invalid("slow_mode must be 0..%d seconds", MaxSlowMode)
	}
	return nil
}

// validateImported checks imported_at: a time, on the types an import
// appends.
func (e *Event) validateImported() error {
	if e.ImportedAt == nil {
		return nil
	}
	if e.ImportedAt.IsZero() {
		return invalid("imported_at is zero")
	}
	switch e.Type {
	case ConversationCreated, MemberAdded, MessageSent:
		return nil
	}
	return invalid("imported_at on %s", e.Type)
}

// validateMentions checks a message's mentioned users: distinct, positive,
// at most MaxMentions.
func validateMentions(ids []int64) error {
	if len(ids) > MaxMentions {
		return invalid("more than %d mentions", MaxMentions)
	}
	seen := make(map[int64]bool, len(ids))
	for _, id := range ids {
		if id <= 0 {
			return invalid("mentioned user ids must be positive")
		}
		if seen[id] {
			return invalid("user %d mentioned twice", id)
		}
		seen[id] = true
	}
	return nil
}

// validateChange checks the fields of a change to a message.
func (e *Event) validateChange(maxBody int) error {
	if _, err := uuid.Parse(e.ChangeID); err != nil || len(e.ChangeID) != 36 {
		return invalid("change_id is not a uuid")
	}
	if e.Seq <= 0 {
		return invalid("seq must be positive")
	}
	switch e.Type {
	case MessageEdited:
		if e.SealedBody != "" {
			if _, err := uuid.Parse(e.MsgID); err != nil || len(e.MsgID) != 36 {
				return invalid("a sealed edit names its message's msg_id")
			}
		}
		return e.validateBody(maxBody)
	case ReactionAdded:
		return ValidEmoji(e.Emoji)
	case MessageThumbnailed:
		return e.Thumbnail.validate()
	}
	if e.Thumbnail != nil {
		return invalid("thumbnail on a %s", e.Type)
	}
	return nil
}

// validateBody checks the body of a send or an edit: Body, or SealedBody
// (whose plaintext the projector checks when it opens it).
func (e *Event) validateBody(maxBody int) error {
	if e.SealedBody != "" {
		if e.Body != nil {
			return invalid("both body and sealed_body")
		}
		if len(e.SealedBody) > sealedLen(maxBody) {
			return invalid("sealed_body over %d bytes", sealedLen(maxBody))
		}
		return nil
	}
	if e.Body == nil || *e.Body == "" && !e.HasAttachments() {
		return invalid("missing body")
	}
	if len(*e.Body) > maxBody {
		return invalid("body over %d bytes", maxBody)
	}
	return storableText("body", *e.Body)
}

// ValidEmoji says whether s may be a reaction: 1..MaxEmoji bytes of text
// without whitespace or control characters.
func ValidEmoji(s string) error {
	if s == "" || len(s) > MaxEmoji {
		return invalid("emoji must be 1..%d bytes", MaxEmoji)
	}
	if err := storableText("emoji", s); err != nil {
		return err
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return invalid("emoji contains whitespace or a control character")
		}
	}
	return nil
}

// storableText refuses the text PostgreSQL cannot store in a text or jsonb
// column: invalid UTF-8 and NUL (U+0000). One such event would fail its
// projection every time it is tried; it must never reach the log through
// Encode, and Decode sends it to the DLQ. U+FFFD is valid text and passes.
func storableText(field, s string) error {
	if !utf8.ValidString(s) {
		return invalid("%s is not valid UTF-8", field)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return invalid("%s contains NUL (U+0000)", field)
	}
	return nil
}

// New returns an event of the given type with a fresh event id and the
// current time.
func New(typ string, conversationID, actorID int64) *Event {
	return &Event{
		V:              Version,
		Type:           typ,
		EventID:        uuid.NewString(),
		ConversationID: conversationID,
		ActorID:        actorID,
		At:             time.Now().UTC(),
	}
}

// Ptr returns a pointer to v, for the optional fields.
func Ptr[T any](v T) *T { return &v }
