package gateway

import (
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

// How the gateway writes the frames of the WebSocket; the frames, their
// type names and the close codes are declared in package protocol.

// entriesFrame is a protocol.EntriesFrame, written by hand (see
// appendEntry).
func entriesFrame(entries []entry, head int64) []byte {
	b := make([]byte, 0, 64+entriesSize(entries))
	return protocol.AppendEntriesFrame(b, head, func(b []byte) []byte { return appendEntries(b, entries) })
}

// encodeFrame encodes v, one of the protocol's frames, as a frame: JSON
// without HTML escaping (as the HTTP bodies) and without the trailing
// newline.
func encodeFrame(v any) []byte {
	return marshalWire(v)
}

// errorFrame is the error frame of err (an *Error or anything toError maps).
func errorFrame(err error, msgID string) []byte {
	e := apierr.From(err)
	f := protocol.ErrorFrame{Type: protocol.FrameError, Code: e.Code, Message: e.Message, Retryable: e.Retryable, MsgID: msgID}
	if e.RetryAfter > 0 {
		f.RetryAfterMS = e.RetryAfter.Milliseconds()
	}
	return encodeFrame(f)
}
