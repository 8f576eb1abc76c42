package events_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
)

// TestImportedAt checks imported_at: a time, on the three types an import
// appends, kept through an encode and decode.
func TestImportedAt(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		typ  string
		when *time.Time
		ok   bool
	}{
		{events.MessageSent, &at, true},
		{events.ConversationCreated, &at, true},
		{events.MemberAdded, &at, true},
		{events.MessageSent, nil, true},
		{events.MessageSent, &time.Time{}, false},
		{events.ReadUpdated, &at, false},
		{events.MessageEdited, &at, false},
	}
	for _, c := range cases {
		e := events.New(c.typ, 4, 7)
		e.MsgID, e.Body, e.UserID, e.ReadSeq = "0f8fad5b-d9cb-469f-a165-70867728950e", events.Ptr("hi"), 9, events.Ptr(int64(1))
		e.ChangeID, e.Seq = "1f8fad5b-d9cb-469f-a165-70867728950e", 1
		e.ImportedAt = c.when
		raw, err := events.Encode(e, 0)
		if !c.ok {
			require.ErrorIs(t, err, events.ErrInvalid, "%s %v", c.typ, c.when)
			continue
		}
		require.NoError(t, err, "%s %v", c.typ, c.when)
		d, err := events.Decode(raw, 0)
		require.NoError(t, err)
		require.Equal(t, c.when != nil, d.Imported())
		if c.when != nil {
			require.True(t, c.when.Equal(*d.ImportedAt))
		}
	}
}
