package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// TestLargeStateOldFormat: a state saved before read mode existed loads
// (not read-mode, change count 0); the new fields survive a save and a load.
func TestLargeStateOldFormat(t *testing.T) {
	st, err := decodeState([]byte(`{"format":1,"epoch":1,"cursor":3,"record_version":2,
		"conversations":{"7":{"last_seq":4,"version":2,"holes":[{"from":1,"to":2}]}},"outbox":[]}`))
	require.NoError(t, err)
	cs := st.Conversations[7]
	require.False(t, cs.Large)
	require.Zero(t, cs.ChangeCount)
	require.EqualValues(t, 4, cs.LastSeq)

	cs.Large, cs.ChangeCount = true, 9
	raw, err := json.Marshal(st)
	require.NoError(t, err)
	back, err := decodeState(raw)
	require.NoError(t, err)
	require.True(t, back.Conversations[7].Large)
	require.EqualValues(t, 9, back.Conversations[7].ChangeCount)
	require.Equal(t, st.Conversations, back.Conversations)
}

// largeServer serves GET /v1/conversations/7/messages?after= from msgs
// (seq → version) and ?changed_after= from changes (in order), paged by
// limit, and logs the queries.
type largeServer struct {
	mu      sync.Mutex
	msgs    map[int64]int64
	last    int64
	changes []protocol.Message
	queries []string
}

func (s *largeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := r.URL.Query()
	s.queries = append(s.queries, r.URL.RawQuery)
	limit, _ := strconv.ParseInt(q.Get("limit"), 10, 64)
	var ans protocol.History
	if v := q.Get("after"); v != "" {
		after, _ := strconv.ParseInt(v, 10, 64)
		for seq := after + 1; seq <= s.last; seq++ {
			if int64(len(ans.Messages)) == limit {
				ans.HasMore = true
				break
			}
			ans.Messages = append(ans.Messages, protocol.Message{ConversationID: 7, Seq: seq, Kind: MessageText,
				Body: json.RawMessage(`"x"`), Version: s.msgs[seq]})
		}
	} else {
		after, _ := strconv.ParseInt(q.Get("changed_after"), 10, 64)
		for _, m := range s.changes {
			if m.ChangedOrd <= after {
				continue
			}
			if int64(len(ans.Messages)) == limit {
				ans.HasMore = true
				break
			}
			ans.Messages = append(ans.Messages, m)
		}
	}
	_ = json.NewEncoder(w).Encode(ans)
}

func largeClient(t *testing.T, srv *largeServer, store Store, h Handler) *Client {
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	c, err := New(Config{BaseURL: hs.URL, Token: "t", Store: store, Handler: h, BackfillPage: 2})
	require.NoError(t, err)
	return c
}

// TestLargeMessagesFrameUntrusted: a messages frame the session cannot
// vouch for (no previous change count seen): the gap before its first
// message is read (?after=, pages sized to the gap), its message follows,
// and its changes are read with ?changed_after= rather than taken from the
// frame; each message and version once, in seq order, saved.
func TestLargeMessagesFrameUntrusted(t *testing.T) {
	ctx := context.Background()
	srv := &largeServer{last: 5, msgs: map[int64]int64{},
		changes: []protocol.Message{
			{ConversationID: 7, Seq: 1, Version: 2, ChangedOrd: 1},
			{ConversationID: 7, Seq: 3, Version: 2, ChangedOrd: 2},
			{ConversationID: 7, Seq: 1, Version: 3, ChangedOrd: 3},
		}}
	store := NewMemoryStore()
	require.NoError(t, store.Save(ctx, &State{Format: StateFormat, Epoch: 1,
		Conversations: map[int64]*ConversationState{7: {LastSeq: 2, Large: true}}}))
	var got []int64
	var updates [][2]int64
	c := largeClient(t, srv, store, Handler{
		OnEntry: func(_ context.Context, e Entry) error {
			require.Zero(t, e.InboxSeq)
			got = append(got, e.Message.Seq)
			return nil
		},
		OnUpdate: func(_ context.Context, m Message) error {
			updates = append(updates, [2]int64{m.Seq, m.Version})
			return nil
		},
	})
	f := &protocol.ServerFrame{Type: protocol.FrameMessages, ConversationID: 7, LastSeq: 5, ChangeCount: 3,
		Messages: []Message{{Seq: 5, Body: json.RawMessage(`"x"`)}, {Seq: 2}},
		Changed:  []Message{{Seq: 1, Version: 3, ChangedOrd: 3}}}
	require.NoError(t, c.messagesFrame(ctx, f, false))
	require.Equal(t, []int64{3, 4, 5}, got)
	// The change pages: ords 1, 2 then 3 (limit 2); seq 1 goes to version 2
	// then 3, seq 3 to version 2.
	require.Equal(t, [][2]int64{{1, 2}, {3, 2}, {1, 3}}, updates)
	require.Equal(t, []string{"after=2&limit=2", "changed_after=0&limit=2", "changed_after=2&limit=2"}, srv.queries)
	st, err := store.Load(ctx)
	require.NoError(t, err)
	cs := st.Conversations[7]
	require.EqualValues(t, 5, cs.LastSeq)
	require.EqualValues(t, 3, cs.ChangeCount)
	require.True(t, cs.Large)
	require.Empty(t, cs.Holes)

	// The same frame again, now trusted: nothing new.
	got, updates = nil, nil
	require.NoError(t, c.messagesFrame(ctx, f, true))
	require.Empty(t, got)
	require.Empty(t, updates)
}

// TestLargeHandlerError: the app's handler failing on a read-mode message
// stops the delivery; what is saved stops before it, so it comes again.
func TestLargeHandlerError(t *testing.T) {
	ctx := context.Background()
	srv := &largeServer{last: 6, msgs: map[int64]int64{}}
	store := NewMemoryStore()
	require.NoError(t, store.Save(ctx, &State{Format: StateFormat, Epoch: 1,
		Conversations: map[int64]*ConversationState{7: {LastSeq: 2, Large: true}}}))
	refuse := errors.New("app refused")
	var got []int64
	h := Handler{OnEntry: func(_ context.Context, e Entry) error {
		if e.Message.Seq == 5 && len(got) < 10 && !contains(got, -5) {
			got = append(got, -5)
			return refuse
		}
		got = append(got, e.Message.Seq)
		return nil
	}}
	c := largeClient(t, srv, store, h)
	err := c.catchUpLarge(ctx, []LargeConv{{ConversationID: 7, LastSeq: 6}})
	require.ErrorIs(t, err, refuse)
	st, _ := store.Load(ctx)
	require.EqualValues(t, 4, st.Conversations[7].LastSeq, "the page 3-4 was saved, not 5")

	c2 := largeClient(t, srv, store, h)
	require.NoError(t, c2.catchUpLarge(ctx, []LargeConv{{ConversationID: 7, LastSeq: 6}}))
	require.Equal(t, []int64{3, 4, -5, 5, 6}, got)
	st, _ = store.Load(ctx)
	require.EqualValues(t, 6, st.Conversations[7].LastSeq)
}

func contains(s []int64, v int64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
