package gateway

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/rows"
	"github.com/inboxd/inboxd/protocol"
)

// TestWireFastPaths: the hand-written sync page is byte for byte what
// encoding the protocol's types gives, and decodes back to the same
// entries (the entries frame: ws's TestEntriesFrameWire).
func TestWireFastPaths(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	msg := &protocol.Message{ConversationID: 4, Seq: 9, MsgID: "0f8fad5b-d9cb-469f-a165-70867728950e", SenderID: 7,
		Kind: protocol.MessageText, Body: rows.MessageBody(protocol.MessageText, "hi <b> & \"you\""), CreatedAt: at}
	sys := &protocol.Message{ConversationID: 4, Seq: 1, MsgID: "0f8fad5b-d9cb-469f-a165-70867728950f", SenderID: 1,
		Kind: protocol.MessageSystem, Body: rows.MessageBody(protocol.MessageSystem, `{"event":"member.added","user_id":7,"by":1}`), CreatedAt: at}
	rec := &protocol.Record{ConversationID: 4, Title: "t", ReadSeq: 3, LastSeq: 9, LastMessage: msg, Version: 12}
	internal := []inbox.Entry{
		inbox.NewEntry(10, 4, sys),
		inbox.NewEntry(11, 4, rec),
		inbox.NewEntry(12, 4, msg),
	}
	wire := []protocol.Entry{
		{InboxSeq: 10, ConversationID: 4, Kind: protocol.KindMessage, Message: sys},
		{InboxSeq: 11, ConversationID: 4, Kind: protocol.KindRecord, Record: rec},
		{InboxSeq: 12, ConversationID: 4, Kind: protocol.KindMessage, Message: msg},
	}
	for _, entries := range []int{0, 1, 3} {
		g := &Gateway{cfg: Config{PollInterval: time.Second, MaxHeldPolls: 10}}
		res := &inbox.Result{Page: inbox.Page{Epoch: 2, Head: 15, Entries: internal[:entries]}, HasMore: entries > 0}
		w := httptest.NewRecorder()
		g.writeSyncPage(w, res)
		want, err := protocol.Marshal(protocol.SyncPage{Epoch: 2, Head: 15, Entries: append([]protocol.Entry{}, wire[:entries]...),
			HasMore: entries > 0, Polling: g.pollingHint()})
		require.NoError(t, err)
		require.Equal(t, string(want)+"\n", w.Body.String())
		var page protocol.SyncPage
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &page))
		require.Len(t, page.Entries, entries)
	}
	for i := range internal {
		b, err := json.Marshal(internal[i])
		require.NoError(t, err)
		want, err := json.Marshal(wire[i])
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(b), "entry %d through encoding/json", i)
	}
}
