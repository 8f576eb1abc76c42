package inbox

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// TestMaskBlocked: the text messages and updates of blocked senders are
// marked and emptied in their places, system messages and records are
// not, and the entries given (whose wire forms a cache may share) are
// left as they were.
func TestMaskBlocked(t *testing.T) {
	text := func(seq, sender int64) *protocol.Message {
		return &protocol.Message{ConversationID: 1, Seq: seq, SenderID: sender, Kind: protocol.MessageText,
			Body: json.RawMessage(`"hi"`), Mentions: []int64{3}, Attachments: []protocol.Attachment{{ID: "a"}}}
	}
	sys := &protocol.Message{ConversationID: 1, Seq: 4, SenderID: 2, Kind: protocol.MessageSystem, Body: json.RawMessage(`{"event":"member.added"}`)}
	entries := []Entry{NewEntry(1, 1, text(1, 2)), NewEntry(2, 1, text(2, 5)), NewEntry(3, 1, &protocol.Record{ConversationID: 1}),
		NewEntry(4, 1, sys), {InboxSeq: 5, ConversationID: 1, kind: protocol.KindUpdate, raw: marshalWire(text(1, 2))}}
	before := string(AppendEntries(nil, entries))

	require.Equal(t, before, string(AppendEntries(nil, MaskBlocked(entries, nil))), "no blocks: nothing")
	require.Equal(t, before, string(AppendEntries(nil, MaskBlocked(entries, Blocked{9: {}}))), "blocks of others: nothing")

	out := MaskBlocked(entries, Blocked{2: {}})
	require.Equal(t, before, string(AppendEntries(nil, entries)), "the entries given are not modified")
	var got []protocol.Entry
	require.NoError(t, json.Unmarshal(AppendEntries(nil, out), &got))
	require.Len(t, got, 5)
	for i, e := range got {
		require.Equal(t, int64(i+1), e.InboxSeq, "every entry in its place")
	}
	for _, i := range []int{0, 4} {
		m := got[i].Message
		require.True(t, m.SenderBlocked, "entry %d", i+1)
		require.JSONEq(t, `""`, string(m.Body))
		require.Nil(t, m.Mentions)
		require.Nil(t, m.Attachments)
		require.Equal(t, int64(2), m.SenderID)
	}
	require.False(t, got[1].Message.SenderBlocked, "another sender")
	require.JSONEq(t, `"hi"`, string(got[1].Message.Body))
	require.False(t, got[3].Message.SenderBlocked, "a system message is never masked")
	require.NotNil(t, got[2].Record)

	// A record carries its conversation's last message: masked the same.
	recs := []Entry{NewEntry(1, 1, &protocol.Record{ConversationID: 1, LastMessage: text(1, 2)}),
		NewEntry(2, 1, &protocol.Record{ConversationID: 1, LastMessage: text(1, 5)})}
	require.NoError(t, json.Unmarshal(AppendEntries(nil, MaskBlocked(recs, Blocked{2: {}})), &got))
	require.True(t, got[0].Record.LastMessage.SenderBlocked)
	require.JSONEq(t, `""`, string(got[0].Record.LastMessage.Body))
	require.False(t, got[1].Record.LastMessage.SenderBlocked)
	list := []protocol.Record{{ConversationID: 1, LastMessage: text(1, 2)}, {ConversationID: 2}}
	maskedList := MaskRecords(list, Blocked{2: {}})
	require.True(t, maskedList[0].LastMessage.SenderBlocked)
	require.False(t, list[0].LastMessage.SenderBlocked, "the records given are not modified")

	msgs := []protocol.Message{*text(1, 2), *sys}
	masked := MaskMessages(msgs, Blocked{2: {}})
	require.True(t, masked[0].SenderBlocked)
	require.False(t, masked[1].SenderBlocked)
	require.False(t, msgs[0].SenderBlocked, "the messages given are not modified")
}
