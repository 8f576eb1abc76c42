package bench

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/inboxd/inboxd/protocol"
)

// The fast path reads what a full decode reads, from frames as the
// gateway encodes them (protocol.Marshal), bodies and reactions with
// quotes, brackets and escapes included; what it cannot read it refuses.
func TestScanMessagesFrame(t *testing.T) {
	at := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	msgs := []protocol.Message{
		{ConversationID: 7, Seq: 100001, MsgID: "a", SenderID: 3, Kind: "text", Body: json.RawMessage(`"l:1:1764594000000000000"`), CreatedAt: at},
		{ConversationID: 7, Seq: 100002, MsgID: "b\"}", SenderID: 4, Kind: "text", Body: json.RawMessage(`"x\"],\"changed\":[{\\"`), CreatedAt: at,
			Version: 3, EditedAt: &at, Reactions: []protocol.Reaction{{Emoji: "}\"]", Count: 2, Me: true}}, Mentions: []int64{5, 6}},
		{ConversationID: 7, Seq: 100003, MsgID: "c", SenderID: 5, Kind: "text", Body: json.RawMessage(`{"text":"}]","n":[1,{"a":"\""}]}`), CreatedAt: at, ReplyTo: 100001},
		{ConversationID: 7, Seq: 100004, MsgID: "d", SenderID: 5, Kind: "text", Body: json.RawMessage(`""`), CreatedAt: at, Deleted: true, ChangedOrd: 9},
	}
	for _, tc := range []struct {
		name          string
		msgs, changed []protocol.Message
	}{
		{"all", msgs, msgs[1:2]},
		{"one", msgs[:1], []protocol.Message{}},
		{"none", []protocol.Message{}, msgs[2:]},
	} {
		b, err := protocol.Marshal(protocol.MessagesFrame{Type: protocol.FrameMessages, ConversationID: 7, LastSeq: 100004,
			ChangeCount: 9, Messages: tc.msgs, Changed: tc.changed})
		if err != nil {
			t.Fatal(err)
		}
		conv, got, ok := scanMessagesFrame(b, nil)
		if !ok || conv != 7 || len(got) != len(tc.msgs) {
			t.Fatalf("%s: scan of %s: conv %d, %d messages, ok %v", tc.name, b, conv, len(got), ok)
		}
		var full largeFrame
		if err := json.Unmarshal(b, &full); err != nil {
			t.Fatal(err)
		}
		for i, m := range full.Messages {
			want := []byte(nil)
			if m.Body[0] == '"' {
				want = m.Body
			}
			if got[i].seq != m.Seq || string(got[i].body) != string(want) {
				t.Errorf("%s: message %d scanned as seq %d body %s, decoded as seq %d body %s", tc.name, i, got[i].seq, got[i].body, m.Seq, want)
			}
		}
	}
	for _, bad := range []string{
		`{"type":"entries","head":3}`,
		`{"type":"messages","conversation_id":7,"last_seq":1}`,
		`{"type":"messages","conversation_id":x,"messages":[]}`,
		`{"type":"messages","conversation_id":7,"messages":[{"seq":1}]}`,
		`{"type":"messages","conversation_id":7,"messages":[{"conversation_id":7,"seq":1,"body":"unterminated}]}`,
	} {
		if _, _, ok := scanMessagesFrame([]byte(bad), nil); ok {
			t.Errorf("scan of %s: ok, want refused", bad)
		}
	}
}
