package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

func (u *user) history(t testing.TB, cid int64, query string) protocol.History {
	t.Helper()
	r := u.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/messages?%s", cid, query), nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var h protocol.History
	r.decode(t, &h)
	return h
}

// TestAddedWhileOffline is acceptance 2, first half: a user added to a new
// group while offline learns about it from its inbox alone.
func TestAddedWhileOffline(t *testing.T) {
	tg := newGateway(t, nil)
	a, v := tg.user(t, 1), tg.user(t, 7)

	// V is in one conversation and has synced it.
	a.create(t, "old", 7)
	entries, cursor, _ := v.syncAll(t, 0, 50)
	require.Len(t, entries, 2)

	// Offline: a new group with A and B, then A adds V and talks.
	g := a.create(t, "group", 2)
	before := a.send(t, g, "before V")
	r := a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", g), `{"user_id": 7}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	welcome := a.send(t, g, "welcome V")

	s := v.sync(t, "after="+strconv.FormatInt(cursor, 10))
	require.False(t, s.TooLong)
	require.Len(t, s.Entries, 3, "the join, the record, the welcome")
	requireContiguous(t, cursor, s.Entries)
	join := s.Entries[0]
	require.Equal(t, g, join.ConversationID)
	require.Equal(t, "system", join.Message.Kind)
	body := msgSystem(t, join.Message)
	require.Equal(t, "member.added", body["event"])
	require.EqualValues(t, 7, body["user_id"])
	require.EqualValues(t, 1, body["by"])
	require.Equal(t, "record", s.Entries[1].Kind)
	require.Equal(t, "group", s.Entries[1].Record.Title)
	require.False(t, s.Entries[1].Record.Removed)
	require.Equal(t, welcome.MsgID, s.Entries[2].Message.MsgID)

	// History shows what V may see: from its join on, not "before V".
	h := v.history(t, g, "")
	require.Len(t, h.Messages, 2)
	require.Equal(t, join.Message.Seq, h.Messages[0].Seq)
	require.Equal(t, welcome.Seq, h.Messages[1].Seq)
	h = v.history(t, g, "before="+strconv.FormatInt(join.Message.Seq, 10))
	require.Empty(t, h.Messages)
	require.Less(t, before.Seq, join.Message.Seq)
	tg.verify(t)
}

// TestRemovedMember is acceptance 2, second half: a removed member gets its
// removal and nothing of the conversation sent after it, by any endpoint.
func TestRemovedMember(t *testing.T) {
	tg := newGateway(t, nil)
	a, w := tg.user(t, 1), tg.user(t, 9)
	g := a.create(t, "group", 9)
	m1 := a.send(t, g, "m1")
	w1 := w.send(t, g, "w1")
	_, cursor, _ := w.syncAll(t, 0, 50)

	r := a.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/9", g), nil)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	m2 := a.send(t, g, "m2 after the removal")
	a.send(t, g, "m3 after the removal")

	s := w.sync(t, "after="+strconv.FormatInt(cursor, 10))
	require.Len(t, s.Entries, 2, "the removal and the record")
	requireContiguous(t, cursor, s.Entries)
	removal := s.Entries[0].Message
	require.Equal(t, "member.removed", msgSystem(t, removal)["event"])
	require.EqualValues(t, 9, msgSystem(t, removal)["user_id"])
	rec := s.Entries[1].Record
	require.True(t, rec.Removed)
	require.Equal(t, removal.Seq, rec.LastSeq, "a removed record stops at the removal")
	require.Equal(t, removal.MsgID, rec.LastMessage.MsgID)
	require.Less(t, removal.Seq, m2.Seq)

	// Nothing after the removal, whatever is asked.
	for _, q := range []string{"", "before=" + strconv.FormatInt(m2.Seq+10, 10), "before=9223372036854775807&limit=200"} {
		h := w.history(t, g, q)
		require.NotEmpty(t, h.Messages)
		require.Equal(t, removal.Seq, h.Messages[len(h.Messages)-1].Seq, "query %q", q)
	}
	all, head, _ := w.syncAll(t, 0, 200)
	for _, e := range all {
		if e.Message != nil {
			require.LessOrEqual(t, e.Message.Seq, removal.Seq)
		}
	}
	require.Equal(t, s.Head, head)
	var l protocol.ConversationList
	r = w.do(t, "GET", "/v1/conversations", nil)
	r.decode(t, &l)
	require.Len(t, l.Conversations, 1)
	require.True(t, l.Conversations[0].Removed)
	require.Equal(t, removal.Seq, l.Conversations[0].LastSeq)
	require.Equal(t, removal.MsgID, l.Conversations[0].LastMessage.MsgID)
	r = w.do(t, "GET", "/v1/conversations?since_version="+strconv.FormatInt(l.RecordVersion-1, 10), nil)
	r.decode(t, &l)
	require.Len(t, l.Conversations, 1, "the tombstone")
	require.True(t, l.Conversations[0].Removed)

	// Every write is refused; the data does not change.
	for _, c := range []struct{ method, path, body string }{
		{"POST", fmt.Sprintf("/v1/conversations/%d/messages", g), `{"msg_id":"` + uuid.NewString() + `","body":"x"}`},
		{"POST", fmt.Sprintf("/v1/conversations/%d/members", g), `{"user_id": 9}`},
		{"DELETE", fmt.Sprintf("/v1/conversations/%d/members/1", g), ``},
		{"PATCH", fmt.Sprintf("/v1/conversations/%d/record", g), `{"pinned": true}`},
		{"POST", fmt.Sprintf("/v1/conversations/%d/read", g), `{"seq": 1}`},
	} {
		r := w.do(t, c.method, c.path, c.body)
		require.Equal(t, http.StatusForbidden, r.status, "%s %s: %s", c.method, c.path, r)
		var e protocol.ErrorBody
		r.decode(t, &e)
		require.Equal(t, protocol.CodeNotMember, e.Error.Code)
	}
	// A retry of a send from its time as a member still answers the
	// original; another sender's msg_id gets what any send of a
	// non-member gets, 403 (membership comes before revealing the id).
	r = w.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", g), map[string]any{"msg_id": w1.MsgID, "body": "w1"})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var orig protocol.Message
	r.decode(t, &orig)
	require.Equal(t, w1.Seq, orig.Seq)
	r = w.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", g), map[string]any{"msg_id": m1.MsgID, "body": "m1"})
	require.Equal(t, http.StatusForbidden, r.status, "%s", r)

	// Re-added, W sees what comes next but never the gap.
	r = a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", g), `{"user_id": 9}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	m4 := a.send(t, g, "m4 after the re-add")
	h := w.history(t, g, "limit=200")
	var seqs []int64
	for _, m := range h.Messages {
		seqs = append(seqs, m.Seq)
		require.NotEqual(t, m2.Seq, m.Seq)
		require.NotEqual(t, m2.Seq+1, m.Seq)
	}
	require.Equal(t, m4.Seq, seqs[len(seqs)-1])
	entries, _, _ := w.syncAll(t, head, 50)
	require.Len(t, entries, 3, "the re-add, the record, m4")
	require.False(t, entries[1].Record.Removed)
	tg.verify(t)
}

// TestReadYourWrites: a write answers 202 only once its projection is
// visible (within the ack wait), so the caller's next request sees it: an
// added member can send at once, a removed one cannot, a pin shows in the
// list at once.
func TestReadYourWrites(t *testing.T) {
	tg := newGateway(t, nil)
	a, b := tg.user(t, 1), tg.user(t, 2)
	cid := a.create(t, "ryw")
	for i := 0; i < 10; i++ {
		r := a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", cid), `{"user_id":2}`)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
		b.send(t, cid, "in "+strconv.Itoa(i))

		pinned := i%2 == 0
		r = b.do(t, "PATCH", fmt.Sprintf("/v1/conversations/%d/record", cid), map[string]bool{"pinned": pinned})
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
		var l protocol.ConversationList
		b.do(t, "GET", "/v1/conversations", nil).decode(t, &l)
		require.Equal(t, pinned, l.Conversations[0].Pinned)

		r = b.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/read", cid), map[string]int{"seq": 1000})
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
		b.do(t, "GET", "/v1/conversations", nil).decode(t, &l)
		require.Equal(t, l.Conversations[0].LastSeq, l.Conversations[0].ReadSeq)

		r = a.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/2", cid), nil)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
		r = b.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid), map[string]any{"msg_id": uuid.NewString(), "body": "out"})
		require.Equal(t, http.StatusForbidden, r.status, "%s", r)
	}
	tg.verify(t)
}
