package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// TestBasics walks every endpoint once and checks the wire shapes.
func TestBasics(t *testing.T) {
	tg := newGateway(t, nil)
	a, b := tg.user(t, 1), tg.user(t, 2)

	// dev token
	anon := &user{tg: tg}
	r := anon.do(t, "POST", "/v1/dev/token", `{"user_id": 1}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var tok protocol.DevToken
	r.decode(t, &tok)
	a.token = tok.Token

	cid := a.create(t, "hello", 2)
	m := a.send(t, cid, "hi <b> & \"you\"")
	require.Equal(t, cid, m.ConversationID)
	require.Equal(t, int64(2), m.Seq) // 1 is the created system message
	require.Equal(t, int64(1), m.SenderID)
	require.Equal(t, "text", m.Kind)
	require.Equal(t, "hi <b> & \"you\"", msgText(t, m))

	// B's inbox: created message, its record, the text.
	s := b.sync(t, "after=0")
	require.False(t, s.TooLong)
	require.Equal(t, int64(3), s.Head)
	require.Len(t, s.Entries, 3)
	requireContiguous(t, 0, s.Entries)
	require.Equal(t, "message", s.Entries[0].Kind)
	require.Equal(t, "system", s.Entries[0].Message.Kind)
	require.Equal(t, "conversation.created", msgSystem(t, s.Entries[0].Message)["event"])
	require.Equal(t, "record", s.Entries[1].Kind)
	require.Equal(t, "hello", s.Entries[1].Record.Title)
	require.Equal(t, "message", s.Entries[2].Kind)
	require.Equal(t, m.MsgID, s.Entries[2].Message.MsgID)
	require.NotNil(t, s.Polling)
	require.Positive(t, s.Polling.NextIntervalMS)
	require.False(t, s.HasMore)

	// Exact keys of the wire objects.
	var raw map[string]json.RawMessage
	r = b.do(t, "GET", "/v1/sync?after=0", nil)
	r.decode(t, &raw)
	require.ElementsMatch(t, []string{"epoch", "head", "entries", "has_more", "unread_total", "mention_total", "_polling"}, keys(raw))
	var ents []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw["entries"], &ents))
	require.ElementsMatch(t, []string{"inbox_seq", "conversation_id", "kind", "message"}, keys(ents[0]))
	require.ElementsMatch(t, []string{"inbox_seq", "conversation_id", "kind", "record"}, keys(ents[1]))
	var msg, rec map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(ents[2]["message"], &msg))
	require.ElementsMatch(t, []string{"conversation_id", "seq", "msg_id", "sender_id", "kind", "body", "created_at"}, keys(msg))
	require.NoError(t, json.Unmarshal(ents[1]["record"], &rec))
	require.ElementsMatch(t, []string{"conversation_id", "title", "pinned", "muted", "read_seq", "last_seq",
		"last_message", "version", "removed", "unread_count", "mention_count", "frozen", "slow_mode", "role"}, keys(rec))
	require.Contains(t, r.header.Get("ETag"), fmt.Sprintf(".%d\"", 3))
	require.NotEmpty(t, r.header.Get("X-RateLimit-Limit"))

	// list
	var l protocol.ConversationList
	r = b.do(t, "GET", "/v1/conversations", nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	r.decode(t, &l)
	require.Equal(t, int64(3), l.InboxHead)
	require.Len(t, l.Conversations, 1)
	require.Equal(t, int64(2), l.Conversations[0].LastSeq)
	require.Equal(t, m.MsgID, l.Conversations[0].LastMessage.MsgID)
	require.Nil(t, l.NextPage)

	// history
	r = b.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/messages", cid), nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var h protocol.History
	r.decode(t, &h)
	require.Len(t, h.Messages, 2)
	require.Equal(t, int64(1), h.Messages[0].Seq)
	require.Equal(t, int64(2), h.Messages[1].Seq)

	// record and read changes become record entries
	r = b.do(t, "PATCH", fmt.Sprintf("/v1/conversations/%d/record", cid), `{"pinned": true}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	r = b.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/read", cid), `{"seq": 2}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	s = b.sync(t, "after=3&wait=30")
	for len(s.Entries) < 2 {
		more := b.sync(t, fmt.Sprintf("after=%d&wait=30", s.Head))
		s.Entries = append(s.Entries, more.Entries...)
		s.Head = more.Head
	}
	requireContiguous(t, 3, s.Entries)
	last := s.Entries[len(s.Entries)-1].Record
	require.True(t, last.Pinned)
	require.Equal(t, int64(2), last.ReadSeq)

	// health
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/openapi.yaml"} {
		r = anon.do(t, "GET", p, nil)
		require.Equal(t, http.StatusOK, r.status, "%s %s", p, r)
	}
	r = anon.do(t, "GET", "/metrics", nil)
	require.True(t, strings.Contains(string(r.body), "inboxd_gateway_requests_total"))

	// idempotent retry returns the original
	r = a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid), map[string]any{"msg_id": m.MsgID, "body": "again"})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var again protocol.Message
	r.decode(t, &again)
	require.Equal(t, m.Seq, again.Seq)
	require.Equal(t, msgText(t, m), msgText(t, again))

	// Idempotency-Key header
	key := uuid.NewString()
	r = a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid), `{"body":"by header"}`, "Idempotency-Key", key)
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	var byHeader protocol.Message
	r.decode(t, &byHeader)
	require.Equal(t, key, byHeader.MsgID)
	tg.verify(t)
}

func keys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
