package ws

import (
	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

// How the gateway writes the frames of the WebSocket; the frames, their
// type names and the close codes are declared in package protocol.

// entriesFrame is a protocol.EntriesFrame, written by hand (see
// inbox.AppendEntries).
func entriesFrame(entries []inbox.Entry, head int64) []byte {
	b := make([]byte, 0, 64+inbox.EntriesSize(entries))
	return protocol.AppendEntriesFrame(b, head, func(b []byte) []byte { return inbox.AppendEntries(b, entries) })
}

// encodeFrame encodes v, one of the protocol's frames, as a frame: JSON
// without HTML escaping (as the HTTP bodies) and without the trailing
// newline.
func encodeFrame(v any) []byte {
	b, err := protocol.Marshal(v)
	if err != nil {
		panic("gateway: encode " + err.Error()) // only the protocol's frames
	}
	return b
}

// changeErrorFrame is errorFrame for a change frame: it names its change_id.
func changeErrorFrame(err error, changeID string) []byte {
	e := apierr.From(err)
	f := protocol.ErrorFrame{Type: protocol.FrameError, Code: e.Code, Message: e.Message, Retryable: e.Retryable, ChangeID: changeID}
	if e.RetryAfter > 0 {
		f.RetryAfterMS = e.RetryAfter.Milliseconds()
	}
	return encodeFrame(f)
}

// errorFrame is the error frame of err (an *apierr.Error or anything
// apierr.From maps), naming msgID when it is not empty.
func errorFrame(err error, msgID string) []byte {
	e := apierr.From(err)
	f := protocol.ErrorFrame{Type: protocol.FrameError, Code: e.Code, Message: e.Message, Retryable: e.Retryable, MsgID: msgID}
	if e.RetryAfter > 0 {
		f.RetryAfterMS = e.RetryAfter.Milliseconds()
	}
	return encodeFrame(f)
}
