package protocol

import (
	"encoding/json"
	"time"
)

// The frames of the WebSocket (GET /v1/ws, docs/websocket.md). Every frame
// is one JSON object in one text message, with a "type".

// Frame types, client to server.
const (
	FrameHello = "hello"
	FrameSend  = "send"
	FramePing  = "ping"
	// The changes of a message, as the HTTP routes make them: an edit, a
	// delete, a reaction set (emoji) or removed (emoji empty or absent).
	FrameEdit   = "edit"
	FrameDelete = "delete"
	FrameReact  = "react"
)

// Frame types, server to client.
const (
	FrameWelcome   = "welcome"
	FrameEntries   = "entries"
	FrameTooLong   = "too_long"
	FrameHeartbeat = "heartbeat"
	FrameSendAck   = "send_ack"
	FrameChangeAck = "change_ack"
	FrameError     = "error"
	FramePong      = "pong"
	FrameReceipt   = "receipt"
	// Read-mode conversations, to sessions whose hello said large
	// (docs/large-conversations.md).
	FrameMessages = "messages"
	FrameLarge    = "large"
)

// Close codes the server sends. The 4xxx codes are docs/protocol.md's; the
// others are the standard ones (RFC 6455) with the meaning the server gives
// them.
const (
	CloseUnauthorized   = 4001 // the token is refused: do not reconnect with it
	CloseNotAllowed     = 4003 // the origin is not allowed: do not reconnect
	CloseTooSlow        = 4008 // the client could not keep up: reconnect with the cursor
	CloseRateLimited    = 4029 // reconnect after the error frame's retry_after_ms
	CloseServiceRestart = 1012 // shutdown or drain: reconnect after the error frame's retry_after_ms, if any, else with jittered backoff
	CloseTryAgainLater  = 1013 // not admitted now (a starting or crowded gateway): reconnect after the error frame's retry_after_ms
	CloseGoingAway      = 1001 // sent by proxies, never by the server: as 1012
	CloseProtocol       = 1008 // no hello in time, or a hello HTTP would refuse: reconnect with backoff
	CloseInternal       = 1011 // the hello could not be answered: reconnect with backoff
	CloseTooBig         = 1009 // a client frame over the gateway's limit
)

// Hello is the client's first frame: the cursor (After) and, when known,
// its epoch. A nil Epoch is omitted (no epoch); 0 counts as given.
type Hello struct {
	Type  string `json:"type"` // FrameHello
	After int64  `json:"after"`
	Epoch *int64 `json:"epoch,omitempty"`
	// Large asks for the messages and large frames of read-mode
	// conversations.
	Large bool `json:"large,omitempty"`
}

// Send sends a message, as POST /v1/conversations/{cid}/messages does.
type Send struct {
	Type           string  `json:"type"` // FrameSend
	ConversationID int64   `json:"conversation_id"`
	MsgID          string  `json:"msg_id"`
	Body           string  `json:"body"`
	ReplyTo        int64   `json:"reply_to,omitempty"`
	Mentions       []int64 `json:"mentions,omitempty"`
	MentionAll     bool    `json:"mention_all,omitempty"`
	// Attachments are upload ids, as in POST .../messages.
	Attachments []string `json:"attachments,omitempty"`
}

// Ping asks for a Pong.
type Ping struct {
	Type string `json:"type"` // FramePing
}

// ClientFrame decodes any client frame; which fields matter depends on
// Type. Pointers tell absent (or null) from zero, which the server refuses
// or accepts field by field. Decoding is tolerant: unknown fields are
// ignored, so that newer clients can add fields.
type ClientFrame struct {
	Type string `json:"type"`
	// hello
	After *int64 `json:"after"`
	Epoch *int64 `json:"epoch"`
	Large bool   `json:"large"`
	// send
	ConversationID int64    `json:"conversation_id"`
	MsgID          string   `json:"msg_id"`
	Body           *string  `json:"body"`
	ReplyTo        int64    `json:"reply_to"`
	Mentions       []int64  `json:"mentions"`
	MentionAll     bool     `json:"mention_all"`
	Attachments    []string `json:"attachments"`
	// edit, delete, react
	ChangeID string  `json:"change_id"`
	Seq      int64   `json:"seq"`
	Emoji    *string `json:"emoji"`
	// typing (ConversationID too)
	State string `json:"state"`
}

// Change is an edit, delete or react frame.
type Change struct {
	Type           string `json:"type"` // FrameEdit, FrameDelete or FrameReact
	ChangeID       string `json:"change_id"`
	ConversationID int64  `json:"conversation_id"`
	Seq            int64  `json:"seq"`
	Body           string `json:"body,omitempty"`  // edit
	Emoji          string `json:"emoji,omitempty"` // react; empty removes the reaction
}

// ChangeAck answers a change frame: applied at Version of the message, or
// Pending (appended, not yet projected: the update entry will come, or send
// the frame again with the same change_id).
type ChangeAck struct {
	Type           string `json:"type"` // FrameChangeAck
	ChangeID       string `json:"change_id"`
	ConversationID int64  `json:"conversation_id"`
	Seq            int64  `json:"seq"`
	Version        int64  `json:"version,omitempty"`
	Pending        bool   `json:"pending,omitempty"`
}

// Welcome answers the hello; it is always the first frame from the server.
type Welcome struct {
	Type        string `json:"type"` // FrameWelcome
	Epoch       int64  `json:"epoch"`
	Head        int64  `json:"head"`
	HeartbeatMS int64  `json:"heartbeat_ms"`
	Counts
	Large []LargeConv `json:"large,omitempty"`
	// Reconnect says what to do if this connection is lost without a
	// close frame (a crash of the gateway, a network cut). Absent from
	// gateways without reconnect hints.
	Reconnect *Reconnect `json:"reconnect,omitempty"`
}

// Reconnect is the welcome's hint for a connection lost without a word:
// after one attempt at once (within the backoff's first interval) that
// fails, come back AfterMS after the loss plus a moment drawn uniformly
// in [0, WindowMS] (the time the gateway needs to admit its sessions),
// instead of the backoff's guesses. A later attempt that fails falls back
// to the backoff. docs/protocol.md, "Reconnect hints".
type Reconnect struct {
	AfterMS  int64 `json:"after_ms"`
	WindowMS int64 `json:"window_ms"`
}

// MessagesFrame pushes what is new in a read-mode conversation to a
// session whose hello said large: Messages are new, ascending by seq (the
// first may be beyond the client's last seq: it reads the gap with
// ?after=); Changed are the messages changed since the previous frame, by
// changed_ord.
type MessagesFrame struct {
	Type           string    `json:"type"` // FrameMessages
	ConversationID int64     `json:"conversation_id"`
	LastSeq        int64     `json:"last_seq"`
	ChangeCount    int64     `json:"change_count"`
	Messages       []Message `json:"messages"`
	Changed        []Message `json:"changed"`
}

// LargeFrame carries the whole large list when it changed (a join, a
// removal, a switch of mode).
type LargeFrame struct {
	Type  string      `json:"type"` // FrameLarge
	Large []LargeConv `json:"large"`
}

// ReceiptFrame says that a member of a conversation (UserID) read up to
// ReadSeq: pushed to the other members who are connected, unless the
// member hides its receipts.
type ReceiptFrame struct {
	Type           string `json:"type"` // FrameReceipt
	ConversationID int64  `json:"conversation_id"`
	UserID         int64  `json:"user_id"`
	ReadSeq        int64  `json:"read_seq"`
}

// EntriesFrame carries entries in inbox order; Head is the user's head at
// the read. The gateway writes it with AppendEntriesFrame.
type EntriesFrame struct {
	Type    string  `json:"type"` // FrameEntries
	Entries []Entry `json:"entries"`
	Head    int64   `json:"head"`
}

// TooLongFrame carries exactly the fields of the HTTP too-long answer.
type TooLongFrame struct {
	Type string `json:"type"` // FrameTooLong
	*TooLong
}

// Heartbeat carries the user's head, every heartbeat_ms (jittered).
type Heartbeat struct {
	Type string `json:"type"` // FrameHeartbeat
	Head int64  `json:"head"`
	// Reconnect refreshes the welcome's hint (the window grows with the
	// gateway's sessions). Absent from gateways without reconnect hints.
	Reconnect *Reconnect `json:"reconnect,omitempty"`
}

// SendAck answers a send with the seq the message got (the original one
// for a msg_id sent before). The message itself arrives as an entry.
type SendAck struct {
	Type           string `json:"type"` // FrameSendAck
	MsgID          string `json:"msg_id"`
	ConversationID int64  `json:"conversation_id"`
	Seq            int64  `json:"seq"`
	// Attachments are the files the projected message kept, when the send
	// attached any.
	Attachments []Attachment `json:"attachments,omitempty"`
}

// ErrorFrame is an error, with the codes of the HTTP error body. MsgID is
// set for the error of a send; RetryAfterMS for rate_limited and
// unavailable.
type ErrorFrame struct {
	Type         string `json:"type"` // FrameError
	Code         string `json:"code"`
	Message      string `json:"message"`
	Retryable    bool   `json:"retryable"`
	MsgID        string `json:"msg_id,omitempty"`
	ChangeID     string `json:"change_id,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

// Pong answers a Ping.
type Pong struct {
	Type string `json:"type"` // FramePong
}

// ServerFrame decodes any server frame; which fields are set depends on
// Type. Decoding is tolerant: unknown fields are ignored, and Message stays
// raw so that a frame whose "message" is not a string (an error frame's is;
// a later release may give another frame a message object) still decodes.
type ServerFrame struct {
	Type string `json:"type"`
	// welcome, entries, heartbeat, too_long
	Epoch       int64   `json:"epoch"`
	Head        int64   `json:"head"`
	HeartbeatMS int64   `json:"heartbeat_ms"`
	Entries     []Entry `json:"entries"`
	// too_long
	TooLong       bool     `json:"too_long"`
	RecordVersion int64    `json:"record_version"`
	Conversations []Record `json:"conversations"`
	NextPage      *string  `json:"next_page"`
	Polling       *Polling `json:"_polling"`
	// welcome, heartbeat
	Reconnect *Reconnect `json:"reconnect"`
	// send_ack, change_ack, error
	MsgID          string `json:"msg_id"`
	ChangeID       string `json:"change_id"`
	Version        int64  `json:"version"`
	Pending        bool   `json:"pending"`
	ConversationID int64  `json:"conversation_id"`
	Seq            int64  `json:"seq"`
	// send_ack: the files the projected message kept.
	Attachments  []Attachment    `json:"attachments"`
	Code         string          `json:"code"`
	Message      json.RawMessage `json:"message"`
	Retryable    bool            `json:"retryable"`
	RetryAfterMS int64           `json:"retry_after_ms"`
	// welcome, too_long: the totals
	Counts
	// welcome, too_long, large: the read-mode conversations; messages:
	// one of them (ConversationID too)
	Large       []LargeConv `json:"large"`
	LastSeq     int64       `json:"last_seq"`
	ChangeCount int64       `json:"change_count"`
	Messages    []Message   `json:"messages"`
	Changed     []Message   `json:"changed"`
	// receipt (and ConversationID), typing (ConversationID, State too), presence
	UserID      int64      `json:"user_id"`
	ReadSeq     int64      `json:"read_seq"`
	State       string     `json:"state"`
	ExpiresInMS int64      `json:"expires_in_ms"`
	Online      bool       `json:"online"`
	LastSeen    *time.Time `json:"last_seen"`
}

// ErrorMessage is the message of an error frame: Message as a string, or
// its raw JSON when it is not one.
func (f *ServerFrame) ErrorMessage() string {
	var s string
	if json.Unmarshal(f.Message, &s) == nil {
		return s
	}
	return string(f.Message)
}
