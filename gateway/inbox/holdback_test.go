package inbox

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// A page ends before its first entry without its message or record (on
// several servers, one whose conversation's server does not show it yet);
// pages without one are left whole.
func TestHoldBack(t *testing.T) {
	msg := func(seq int64) Entry { return NewEntry(seq, 7, &protocol.Message{ConversationID: 7, Seq: seq}) }
	missing := Entry{InboxSeq: 3, ConversationID: 9, kind: protocol.KindMessage}
	pages := []Page{
		{Head: 4, Entries: []Entry{msg(1), msg(2), missing, msg(4)}},
		{Head: 2, Entries: []Entry{msg(1), msg(2)}},
		{Head: 1, Entries: []Entry{missing}},
	}
	require.Equal(t, 2, holdBack(pages))
	require.Len(t, pages[0].Entries, 2)
	require.Equal(t, int64(2), pages[0].Entries[1].InboxSeq)
	require.Len(t, pages[1].Entries, 2)
	require.Empty(t, pages[2].Entries)
}
