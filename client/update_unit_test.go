package client

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUpdateDelivery: OnEntry gets every entry; OnUpdate only a version
// higher than any handed over, whether by a message entry (read after the
// change), an update entry or a replay of both; an unknown kind moves the
// cursor; the versions survive a save and a load.
func TestUpdateDelivery(t *testing.T) {
	ctx := context.Background()
	store := NewMemoryStore()
	var entries []int64
	var updates []string
	h := Handler{
		OnEntry: func(_ context.Context, e Entry) error { entries = append(entries, e.InboxSeq); return nil },
		OnUpdate: func(_ context.Context, m Message) error {
			updates = append(updates, m.Text())
			return nil
		},
	}
	c, err := New(Config{BaseURL: "http://127.0.0.1:1", Token: "t", Store: store, Handler: h})
	require.NoError(t, err)
	msg := func(seq, version int64, text string) *Message {
		body, _ := json.Marshal(text)
		return &Message{ConversationID: 7, Seq: seq, Kind: MessageText, Body: body, Version: version}
	}
	in := []Entry{
		{InboxSeq: 1, ConversationID: 7, Kind: KindMessage, Message: msg(1, 0, "a")},
		// Read after its edit: the message entry already has version 2.
		{InboxSeq: 2, ConversationID: 7, Kind: KindMessage, Message: msg(2, 2, "b edited")},
		{InboxSeq: 3, ConversationID: 7, Kind: KindUpdate, Message: msg(1, 2, "a edited")},
		{InboxSeq: 4, ConversationID: 7, Kind: KindUpdate, Message: msg(2, 2, "b edited")}, // had it
		{InboxSeq: 5, ConversationID: 7, Kind: "poll", Message: msg(2, 9, "a kind of the future")},
		{InboxSeq: 6, ConversationID: 7, Kind: KindUpdate, Message: msg(1, 3, "a deleted")},
		{InboxSeq: 7, ConversationID: 7, Kind: KindUpdate, Message: msg(1, 2, "a edited")}, // older
	}
	seq := newSequencer(c)
	_, err = seq.offer(ctx, in)
	require.NoError(t, err)
	_, err = seq.offer(ctx, in) // a replay: below the cursor, dropped
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7}, entries)
	require.Equal(t, []string{"a edited", "a deleted"}, updates)
	_, cursor := c.Position()
	require.EqualValues(t, 7, cursor)
	require.Equal(t, map[int64]int64{1: 3, 2: 2}, c.Conversation(7).Versions)

	// A restarted client (same store) gets the same entries again from an
	// older cursor (a crash before the save): still no update twice.
	st, err := store.Load(ctx)
	require.NoError(t, err)
	st.Cursor = 2
	require.NoError(t, store.Save(ctx, st))
	updates, entries = nil, nil
	c2, err := New(Config{BaseURL: "http://127.0.0.1:1", Token: "t", Store: store, Handler: h})
	require.NoError(t, err)
	_, err = newSequencer(c2).offer(ctx, in)
	require.NoError(t, err)
	require.Equal(t, []int64{3, 4, 5, 6, 7}, entries)
	require.Empty(t, updates)
}
