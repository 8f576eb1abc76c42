package protocol

import "time"

// The bodies of the HTTP API (docs/protocol.md, "Endpoints"). Request bodies
// are decoded strictly by the gateway (unknown fields are a 400); answers
// are decoded tolerantly by clients.

// Polling is the _polling hint of every sync answer: how long a client that
// does not long-poll should wait before asking again.
type Polling struct {
	NextIntervalMS int64 `json:"next_interval_ms"`
	// Reconnect is the crash hint of a WebSocket's welcome for a polling
	// client (docs/protocol.md, "Reconnect hints"). Absent from gateways
	// without reconnect hints.
	Reconnect *Reconnect `json:"reconnect,omitempty"`
}

// SyncPage is the 200 answer of GET /v1/sync with entries: those with
// after < inbox_seq <= Head, ascending. HasMore says the last entry is
// below the head. Entries is never null. The gateway writes it with
// AppendSyncPage.
type SyncPage struct {
	Epoch   int64   `json:"epoch"`
	Head    int64   `json:"head"`
	Entries []Entry `json:"entries"`
	HasMore bool    `json:"has_more"`
	Counts
	Polling Polling `json:"_polling"`
	// Large lists the user's read-mode conversations; absent when none.
	Large []LargeConv `json:"large,omitempty"`
}

// TooLong is the too-long answer of GET /v1/sync (and, with a type, the
// too_long frame): jump to Head; Conversations is the first page of the
// conversation list, NextPage (null on the last page) its continuation.
type TooLong struct {
	TooLong       bool     `json:"too_long"`
	Epoch         int64    `json:"epoch"`
	Head          int64    `json:"head"`
	RecordVersion int64    `json:"record_version"`
	Conversations []Record `json:"conversations"`
	NextPage      *string  `json:"next_page"`
	Counts
	Polling Polling     `json:"_polling"`
	Large   []LargeConv `json:"large,omitempty"`
}

// SyncAnswer decodes either 200 answer of GET /v1/sync: a SyncPage
// (TooLong false) or a TooLong. Decoding only; the server writes the two
// specific types. Polling is nil when the answer has none.
type SyncAnswer struct {
	TooLong       bool     `json:"too_long"`
	Epoch         int64    `json:"epoch"`
	Head          int64    `json:"head"`
	Entries       []Entry  `json:"entries"`
	HasMore       bool     `json:"has_more"`
	RecordVersion int64    `json:"record_version"`
	Conversations []Record `json:"conversations"`
	NextPage      *string  `json:"next_page"`
	Counts
	Polling *Polling    `json:"_polling"`
	Large   []LargeConv `json:"large"`
}

// ConversationList is the answer of GET /v1/conversations. InboxHead and
// RecordVersion are read before the list. NextPage is null on the last page.
type ConversationList struct {
	Epoch         int64    `json:"epoch"`
	InboxHead     int64    `json:"inbox_head"`
	RecordVersion int64    `json:"record_version"`
	Conversations []Record `json:"conversations"`
	NextPage      *string  `json:"next_page"`
}

// History is the answer of GET /v1/conversations/{cid}/messages: ascending,
// HasMore says older visible messages exist (with ?after, newer ones; with
// ?changed_after, more changed ones, the messages then in changed_ord order).
type History struct {
	Messages []Message `json:"messages"`
	HasMore  bool      `json:"has_more"`
}

// Member is a current member of a conversation: JoinedSeq is the seq of the
// member.added (or conversation.created) message of its current span, Role
// its role (owner, admin, moderator or member; docs/protocol.md, "Roles").
type Member struct {
	UserID    int64  `json:"user_id"`
	JoinedSeq int64  `json:"joined_seq"`
	Role      string `json:"role"`
}

// SetRole is the body of PUT /v1/conversations/{cid}/members/{uid}/role
// (Role: owner, admin, moderator or member) and of its server API route.
// ChangeID (a uuid, or the Idempotency-Key header) makes a retry the same
// change; the server API's takes its Idempotency-Key.
type SetRole struct {
	Role     string `json:"role"`
	ChangeID string `json:"change_id,omitempty"`
}

// Sanction is the body of PUT /v1/conversations/{cid}/bans/{uid} and
// PUT .../mutes/{uid} (docs/protocol.md, "Ban and mute"): Until, in the
// future, is when the ban or mute lapses (absent: when lifted). ChangeID
// (a uuid, or the Idempotency-Key header) makes a retry the same change.
type Sanction struct {
	Until    *time.Time `json:"until,omitempty"`
	ChangeID string     `json:"change_id,omitempty"`
}

// SanctionList is the answer of GET /v1/conversations/{cid}/bans and
// .../mutes (and the server API's): the bans or mutes that stand, by
// ascending user id, a page at a time. NextPage is null on the last page.
type SanctionList struct {
	ConversationID int64           `json:"conversation_id"`
	Sanctions      []SanctionEntry `json:"sanctions"`
	NextPage       *string         `json:"next_page"`
}

// SanctionEntry is one standing ban or mute: of UserID, until Until
// (absent: until lifted), set by By (0: a service) at At.
type SanctionEntry struct {
	UserID int64      `json:"user_id"`
	Until  *time.Time `json:"until,omitempty"`
	By     int64      `json:"by"`
	At     time.Time  `json:"at"`
}

// UpdateConversation is the body of PATCH /v1/conversations/{cid} and of
// its server API route: any of a new title (1..256 bytes), frozen and a
// slow mode (seconds, 0..21600; 0: off), at least one; absent (or null)
// settings do not change (docs/protocol.md, "Frozen and slow mode").
// ChangeID (a uuid, or the Idempotency-Key header) makes a retry the same
// change; the server API's takes its Idempotency-Key.
type UpdateConversation struct {
	Title    *string `json:"title,omitempty"`
	Frozen   *bool   `json:"frozen,omitempty"`
	SlowMode *int    `json:"slow_mode,omitempty"`
	ChangeID string  `json:"change_id,omitempty"`
}

// MemberList is the answer of GET /v1/conversations/{cid}/members: current
// members by ascending user id, a page at a time. NextPage is null on the
// last page.
type MemberList struct {
	ConversationID int64    `json:"conversation_id"`
	Members        []Member `json:"members"`
	NextPage       *string  `json:"next_page"`
}

// CreateConversation is the body of POST /v1/conversations; both fields
// are optional.
type CreateConversation struct {
	Title   string  `json:"title"`
	Members []int64 `json:"members"`
	// Channel creates the conversation in read fan-out from its first seq
	// (docs/large-conversations.md).
	Channel bool `json:"channel,omitempty"`
	// Roles makes the members' roles limit who may add and remove members
	// and delete others' messages (docs/protocol.md, "Roles"); absent,
	// the deployment's default (--conversation-roles).
	Roles *bool `json:"roles,omitempty"`
}

// ConversationCreated is the 201 answer of POST /v1/conversations.
type ConversationCreated struct {
	ConversationID int64 `json:"conversation_id"`
}

// AddMember is the body of POST /v1/conversations/{cid}/members: exactly
// one of UserID and UserIDs (1..1000 distinct ids, one event each).
type AddMember struct {
	UserID  int64   `json:"user_id,omitempty"`
	UserIDs []int64 `json:"user_ids,omitempty"`
}

// SetRecord is the body of PATCH /v1/conversations/{cid}/record: at least
// one of the two; null counts as absent.
type SetRecord struct {
	Pinned *bool `json:"pinned"`
	Muted  *bool `json:"muted"`
}

// MarkRead is the body of POST /v1/conversations/{cid}/read. Seq is
// required (null is refused), hence the pointer.
type MarkRead struct {
	Seq *int64 `json:"seq"`
}

// SendMessage is the body of POST /v1/conversations/{cid}/messages. MsgID
// may instead come in the Idempotency-Key header.
type SendMessage struct {
	MsgID      string  `json:"msg_id"`
	Body       string  `json:"body"`
	ReplyTo    int64   `json:"reply_to,omitempty"`
	Mentions   []int64 `json:"mentions,omitempty"`
	MentionAll bool    `json:"mention_all,omitempty"`
	// Attachments are the ids of finished uploads of the sender in this
	// conversation; with any, the body may be empty.
	Attachments []string `json:"attachments,omitempty"`
}

// UploadRequest is the body of POST /v1/conversations/{cid}/uploads: the
// file a member is about to upload.
type UploadRequest struct {
	Name        string `json:"name"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256,omitempty"`
	Width       int    `json:"width,omitempty"`
	Height      int    `json:"height,omitempty"`
	// Multipart asks for an upload in parts (Upload.Parts), each PUT on
	// its own URL and resumable: for large files.
	Multipart bool `json:"multipart,omitempty"`
}

// MaxUploadParts is the most parts an Upload lists.
const MaxUploadParts = 100

// Upload states (Upload.State).
const (
	UploadOpen     = "open"     // waiting for its bytes
	UploadUploaded = "uploaded" // the store holds the whole sealed file
	UploadAttached = "attached" // a message took it
)

// UploadMultipart is the Method of an upload in parts.
const UploadMultipart = "multipart"

// UploadPart is a part of a multipart upload still to PUT: Size sealed
// bytes, the chunks of the plaintext from (Number-1)*PartSize
// (protocol/sealed.PartOf), to PUT on URL with Headers.
type UploadPart struct {
	Number  int               `json:"number"`
	Size    int64             `json:"size"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// Upload is the answer of POST /v1/conversations/{cid}/uploads: where to
// PUT the sealed file and the key to seal it with.
type Upload struct {
	ID             string `json:"id"`
	ConversationID int64  `json:"conversation_id"`
	Name           string `json:"name"`
	ContentType    string `json:"content_type"`
	Size           int64  `json:"size"`
	SHA256         string `json:"sha256,omitempty"`
	Width          int    `json:"width,omitempty"`
	Height         int    `json:"height,omitempty"`
	// Key seals the file (32 bytes, unpadded base64url); SealedSize is
	// the size of the sealed file, which the PUT must carry; ChunkSize is
	// the plaintext size of every sealed chunk but the last.
	Key        string `json:"key,omitempty"`
	SealedSize int64  `json:"sealed_size"`
	ChunkSize  int    `json:"chunk_size"`
	// URL takes a PUT of the sealed file, with Headers, until URLExpiresAt;
	// an upload not attached to a message by ExpiresAt is removed. Key,
	// URL and URLExpiresAt are absent once the upload is attached, and
	// URL is for a multipart upload (its parts have URLs of their own).
	URL          string            `json:"url,omitempty"`
	Method       string            `json:"method"`
	Headers      map[string]string `json:"headers"`
	URLExpiresAt time.Time         `json:"url_expires_at,omitzero"`
	ExpiresAt    time.Time         `json:"expires_at"`
	// State is UploadOpen, UploadUploaded or UploadAttached.
	State string `json:"state"`
	// A multipart upload (Method "multipart", no URL) has PartSize
	// plaintext bytes per part but the last; Parts are the first parts
	// the store does not hold yet, at most MaxUploadParts of them (a
	// later GET of the upload gives the next), and PartsLeft how many it
	// lacks in all. Once it lacks none, POST .../uploads/{id}/complete
	// joins them into the file.
	PartSize  int64        `json:"part_size,omitempty"`
	Parts     []UploadPart `json:"parts,omitempty"`
	PartsLeft int          `json:"parts_left,omitempty"`
}

// AttachmentURL is the answer of GET
// /v1/conversations/{cid}/attachments/{id}?redirect=false: the presigned
// URL the default answer redirects to.
type AttachmentURL struct {
	URL        string    `json:"url"`
	ExpiresAt  time.Time `json:"expires_at"`
	Size       int64     `json:"size"`
	SealedSize int64     `json:"sealed_size"`
}

// ReceiptList is the answer of GET /v1/conversations/{cid}/receipts: the
// read positions of the current members who show them, by ascending user
// id, a page at a time. NextPage is null on the last page.
type ReceiptList struct {
	ConversationID int64     `json:"conversation_id"`
	Receipts       []Receipt `json:"receipts"`
	NextPage       *string   `json:"next_page"`
}

// EditMessage is the body of PATCH /v1/conversations/{cid}/messages/{seq}.
// ChangeID (or the Idempotency-Key header) is the change's idempotency key.
type EditMessage struct {
	ChangeID string `json:"change_id"`
	Body     string `json:"body"`
}

// SetReaction is the body of PUT /v1/conversations/{cid}/messages/{seq}/reaction.
type SetReaction struct {
	ChangeID string `json:"change_id"`
	Emoji    string `json:"emoji"`
}

// ChangeOnly is the optional body of the DELETEs of a message and of a
// reaction: the change's idempotency key (or the Idempotency-Key header).
type ChangeOnly struct {
	ChangeID string `json:"change_id"`
}

// ChangePending is the 202 of a change appended but not yet projected:
// retry with the same ChangeID. Status is StatusPending.
type ChangePending struct {
	ChangeID string `json:"change_id"`
	Status   string `json:"status"`
}

// Statuses of the 202 answers.
const (
	StatusAccepted = "accepted"
	StatusPending  = "pending"
)

// SendPending is the 202 answer of a send that is appended but not yet
// projected: retry with the same MsgID. Status is StatusPending.
type SendPending struct {
	MsgID  string `json:"msg_id"`
	Status string `json:"status"`
}

// Accepted is the 202 answer of the member, record and read changes. Status
// is StatusAccepted.
type Accepted struct {
	Status string `json:"status"`
}

// DevTokenRequest is the body of POST /v1/dev/token (dev mode only).
type DevTokenRequest struct {
	UserID int64 `json:"user_id"`
}

// DevToken is the answer of POST /v1/dev/token.
type DevToken struct {
	Token     string    `json:"token"`
	UserID    int64     `json:"user_id"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Revocation is the body and the answer of POST /v1/server/revocations:
// a token revoked by its id (TokenID, its jti), or the tokens issued
// before IssuedBefore (now, when absent) of UserID, or of every user when
// UserID is 0. The answer carries the stored ID and CreatedAt.
type Revocation struct {
	ID           int64      `json:"id,omitempty"`
	UserID       int64      `json:"user_id,omitempty"`
	TokenID      string     `json:"token_id,omitempty"`
	IssuedBefore *time.Time `json:"issued_before,omitempty"`
	CreatedAt    time.Time  `json:"created_at,omitzero"`
}

// Block is one user the caller blocks (docs/protocol.md, "Blocks"): since
// At, the time of the block.
type Block struct {
	UserID int64     `json:"user_id"`
	At     time.Time `json:"at"`
}

// BlockList is the answer of GET /v1/blocks: the users the caller blocks,
// by user id; NextPage is the page token of the rest (null: the last
// page).
type BlockList struct {
	Blocks   []Block `json:"blocks"`
	NextPage *string `json:"next_page"`
}

// SearchResults is the answer of GET /v1/search (docs/protocol.md):
// the page of results, the cursor of the next page when more may follow,
// and, on the first page only, the estimated count of matches.
type SearchResults struct {
	Results        []SearchResult `json:"results"`
	NextCursor     string         `json:"next_cursor,omitempty"`
	EstimatedTotal *int64         `json:"estimated_total,omitempty"`
}

// SearchResult is one message found, with a snippet of its body and its
// rank (PostgreSQL's ts_rank against the query).
type SearchResult struct {
	Message Message       `json:"message"`
	Snippet []SnippetPart `json:"snippet"`
	Rank    float64       `json:"rank"`
}

// SnippetPart is a segment of a snippet; Match marks the words the query
// matched. Segments are plain text, never markup.
type SnippetPart struct {
	Text  string `json:"text"`
	Match bool   `json:"match,omitempty"`
}
