package ws

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/protocol"
)

// TestEntriesFrameWire: the hand-written entries frame is byte for byte
// what encoding the protocol's frame gives, and decodes back to the same
// entries (the sync page: the gateway's TestWireFastPaths).
func TestEntriesFrameWire(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	msg := &protocol.Message{ConversationID: 4, Seq: 9, MsgID: "0f8fad5b-d9cb-469f-a165-70867728950e", SenderID: 7,
		Kind: protocol.MessageText, Body: json.RawMessage(`"hi <b> & \"you\""`), CreatedAt: at}
	sys := &protocol.Message{ConversationID: 4, Seq: 1, MsgID: "0f8fad5b-d9cb-469f-a165-70867728950f", SenderID: 1,
		Kind: protocol.MessageSystem, Body: json.RawMessage(`{"event":"member.added","user_id":7,"by":1}`), CreatedAt: at}
	rec := &protocol.Record{ConversationID: 4, Title: "t", ReadSeq: 3, LastSeq: 9, LastMessage: msg, Version: 12}
	internal := []inbox.Entry{inbox.NewEntry(10, 4, sys), inbox.NewEntry(11, 4, rec), inbox.NewEntry(12, 4, msg)}
	wire := []protocol.Entry{
		{InboxSeq: 10, ConversationID: 4, Kind: protocol.KindMessage, Message: sys},
		{InboxSeq: 11, ConversationID: 4, Kind: protocol.KindRecord, Record: rec},
		{InboxSeq: 12, ConversationID: 4, Kind: protocol.KindMessage, Message: msg},
	}
	for _, entries := range []int{0, 1, 3} {
		frame := entriesFrame(internal[:entries], 15)
		want := encodeFrame(protocol.EntriesFrame{Type: protocol.FrameEntries, Entries: append([]protocol.Entry{}, wire[:entries]...), Head: 15})
		require.Equal(t, string(want), string(frame))
		var f protocol.EntriesFrame
		require.NoError(t, json.Unmarshal(frame, &f))
		require.Len(t, f.Entries, entries)
	}
}
