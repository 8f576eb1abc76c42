package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// The frames of PROTOCOL.md's WebSocket section. Every frame is one JSON
// object in one text message with a "type".

// Close codes of PROTOCOL.md (and the standard ones the server uses).
const (
	CloseUnauthorized   = 4001 // do not reconnect with the same token
	CloseNotAllowed     = 4003 // origin not allowed
	CloseTooSlow        = 4008 // reconnect with the cursor
	CloseRateLimited    = 4029 // reconnect after retry_after_ms
	CloseServiceRestart = 1012 // reconnect with jittered backoff
	CloseGoingAway      = 1001 // reconnect with jittered backoff
	closeProtocol       = 1008 // policy violation: no hello, bad hello
	closeInternal       = 1011 // the hello could not be answered
)

// wsInbound is any client frame; which fields matter depends on Type.
// Decoding is tolerant: unknown fields are ignored (a newer client may send
// more), unlike the HTTP bodies.
type wsInbound struct {
	Type string `json:"type"`
	// hello
	After *int64 `json:"after"`
	Epoch *int64 `json:"epoch"`
	// send
	ConversationID int64   `json:"conversation_id"`
	MsgID          string  `json:"msg_id"`
	Body           *string `json:"body"`
}

type wsWelcome struct {
	Type        string `json:"type"`
	Epoch       int64  `json:"epoch"`
	Head        int64  `json:"head"`
	HeartbeatMS int64  `json:"heartbeat_ms"`
}

type wsEntries struct {
	Type    string  `json:"type"`
	Entries []entry `json:"entries"`
	Head    int64   `json:"head"`
}

// wsTooLong carries the fields of the HTTP too-long answer.
type wsTooLong struct {
	Type string `json:"type"`
	*tooLongResponse
}

type wsHeartbeat struct {
	Type string `json:"type"`
	Head int64  `json:"head"`
}

// wsSendAck answers a send with the seq the message got (the original one
// for a msg_id sent before). The message itself arrives as an entry: the
// sender is a member.
type wsSendAck struct {
	Type           string `json:"type"`
	MsgID          string `json:"msg_id"`
	ConversationID int64  `json:"conversation_id"`
	Seq            int64  `json:"seq"`
}

type wsError struct {
	Type         string `json:"type"`
	Code         string `json:"code"`
	Message      string `json:"message"`
	Retryable    bool   `json:"retryable"`
	MsgID        string `json:"msg_id,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

type wsPong struct {
	Type string `json:"type"`
}

// encodeFrame encodes v as a frame: JSON without HTML escaping (as the
// HTTP bodies) and without the trailing newline.
// entriesFrame is the entries frame (wsEntries's shape), written by hand
// (see appendEntry).
func entriesFrame(entries []entry, head int64) []byte {
	b := make([]byte, 0, 64+entriesSize(entries))
	b = append(b, `{"type":"entries","entries":`...)
	b = appendEntries(b, entries)
	b = append(b, `,"head":`...)
	b = strconv.AppendInt(b, head, 10)
	return append(b, '}')
}

func encodeFrame(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only our own types are encoded; they always encode.
		panic("gateway: encode frame: " + err.Error())
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// errorFrame is the error frame of err (an *Error or anything toError maps).
func errorFrame(err error, msgID string) []byte {
	e := toError(err)
	f := wsError{Type: "error", Code: e.Code, Message: e.Message, Retryable: e.Retryable, MsgID: msgID}
	if e.RetryAfter > 0 {
		f.RetryAfterMS = e.RetryAfter.Milliseconds()
	}
	return encodeFrame(f)
}
