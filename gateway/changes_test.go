package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

func msgPath(cid, seq int64) string { return fmt.Sprintf("/v1/conversations/%d/messages/%d", cid, seq) }

// change makes one change and decodes the message it answers.
func (u *user) change(t testing.TB, method, path string, body any, want int) protocol.Message {
	t.Helper()
	r := u.do(t, method, path, body)
	require.Equal(t, want, r.status, "%s %s: %s", method, path, r)
	var m protocol.Message
	if want == http.StatusOK {
		r.decode(t, &m)
	}
	return m
}

// lastUpdate returns the newest update entry of (cid, seq) in entries.
func lastUpdate(entries []protocol.Entry, cid, seq int64) *protocol.Message {
	var m *protocol.Message
	for _, e := range entries {
		if e.Kind == protocol.KindUpdate && e.ConversationID == cid && e.Message.Seq == seq {
			m = e.Message
		}
	}
	return m
}

// TestMessageChanges walks the changes of a message over HTTP: each answer,
// the update entries the other members sync, history and the conversation
// list showing the current state, the refusals, and idempotency.
func TestMessageChanges(t *testing.T) {
	tg := newGateway(t, nil)
	a, b, c := tg.user(t, 1), tg.user(t, 2), tg.user(t, 3)
	cid := a.create(t, "group", 2) // a created it: a may delete any message
	hi := b.send(t, cid, "helo")
	_, cursor, _ := a.syncAll(t, 0, 50)

	// An edit by the sender.
	id := uuid.NewString()
	m := b.change(t, "PATCH", msgPath(cid, hi.Seq), map[string]any{"change_id": id, "body": "hello"}, 200)
	require.Equal(t, "hello", msgText(t, &m))
	require.EqualValues(t, 2, m.Version)
	require.NotNil(t, m.EditedAt)
	again := b.change(t, "PATCH", msgPath(cid, hi.Seq), map[string]any{"change_id": id, "body": "hello"}, 200)
	require.EqualValues(t, 2, again.Version, "a retry of the change_id applies nothing")
	entries, head, _ := a.syncAll(t, cursor, 50)
	requireContiguous(t, cursor, entries)
	up := lastUpdate(entries, cid, hi.Seq)
	require.NotNil(t, up, "the other member gets an update entry")
	require.Equal(t, "hello", msgText(t, up))

	// Reactions: one per member, counted, the reader's marked.
	b.change(t, "PUT", msgPath(cid, hi.Seq)+"/reaction", map[string]any{"change_id": uuid.NewString(), "emoji": "👍"}, 200)
	m = a.change(t, "PUT", msgPath(cid, hi.Seq)+"/reaction", map[string]any{"change_id": uuid.NewString(), "emoji": "👍"}, 200)
	require.Equal(t, []protocol.Reaction{{Emoji: "👍", Count: 2, Me: true}}, m.Reactions)
	m = a.change(t, "PUT", msgPath(cid, hi.Seq)+"/reaction", map[string]any{"change_id": uuid.NewString(), "emoji": "🎉"}, 200)
	require.Equal(t, []protocol.Reaction{{Emoji: "🎉", Count: 1, Me: true}, {Emoji: "👍", Count: 1}}, m.Reactions)
	h := b.history(t, cid, "")
	last := h.Messages[len(h.Messages)-1]
	require.Equal(t, []protocol.Reaction{{Emoji: "🎉", Count: 1}, {Emoji: "👍", Count: 1, Me: true}}, last.Reactions,
		"history marks the reader's own reaction")
	entries, _, _ = b.syncAll(t, 0, 50)
	up = lastUpdate(entries, cid, hi.Seq)
	require.Equal(t, []protocol.Reaction{{Emoji: "🎉", Count: 1}, {Emoji: "👍", Count: 1, Me: true}}, up.Reactions,
		"so do update entries")
	m = b.change(t, "DELETE", msgPath(cid, hi.Seq)+"/reaction", nil, 400) // no change_id
	m = b.change(t, "DELETE", msgPath(cid, hi.Seq)+"/reaction", map[string]any{"change_id": uuid.NewString()}, 200)
	require.Equal(t, []protocol.Reaction{{Emoji: "🎉", Count: 1}}, m.Reactions)

	// Refusals.
	for _, tc := range []struct {
		u      *user
		method string
		path   string
		body   any
		status int
		code   string
	}{
		{a, "PATCH", msgPath(cid, hi.Seq), map[string]any{"change_id": uuid.NewString(), "body": "mine now"}, 403, protocol.CodeForbidden},
		{c, "PATCH", msgPath(cid, hi.Seq), map[string]any{"change_id": uuid.NewString(), "body": "x"}, 403, protocol.CodeNotMember},
		{b, "PATCH", msgPath(cid, 99), map[string]any{"change_id": uuid.NewString(), "body": "x"}, 404, protocol.CodeNotFound},
		{b, "PATCH", msgPath(999999, 1), map[string]any{"change_id": uuid.NewString(), "body": "x"}, 404, protocol.CodeNotFound},
		{b, "PATCH", msgPath(cid, 1), map[string]any{"change_id": uuid.NewString(), "body": "x"}, 400, protocol.CodeBadRequest},
		{b, "PATCH", msgPath(cid, hi.Seq), map[string]any{"change_id": uuid.NewString(), "body": ""}, 400, protocol.CodeBadRequest},
		{b, "PATCH", msgPath(cid, hi.Seq), map[string]any{"change_id": uuid.NewString(), "body": strings.Repeat("x", 5000)}, 413, protocol.CodePayloadTooLarge},
		{b, "PATCH", msgPath(cid, hi.Seq), map[string]any{"change_id": "nope", "body": "x"}, 400, protocol.CodeBadRequest},
		{b, "PATCH", msgPath(cid, hi.Seq), map[string]any{"body": "x"}, 400, protocol.CodeBadRequest},
		{b, "PATCH", msgPath(cid, hi.Seq), map[string]any{"change_id": uuid.NewString(), "body": "x", "emoji": "👍"}, 400, protocol.CodeBadRequest},
		{b, "PUT", msgPath(cid, hi.Seq) + "/reaction", map[string]any{"change_id": uuid.NewString(), "emoji": "a b"}, 400, protocol.CodeBadRequest},
		{b, "PUT", msgPath(cid, hi.Seq) + "/reaction", map[string]any{"change_id": uuid.NewString(), "emoji": ""}, 400, protocol.CodeBadRequest},
		{b, "PUT", msgPath(cid, hi.Seq) + "/reaction", map[string]any{"change_id": uuid.NewString()}, 400, protocol.CodeBadRequest},
		{b, "DELETE", msgPath(cid, 0), map[string]any{"change_id": uuid.NewString()}, 400, protocol.CodeBadRequest},
	} {
		r := tc.u.do(t, tc.method, tc.path, tc.body)
		require.Equal(t, tc.status, r.status, "%s %s %v: %s", tc.method, tc.path, tc.body, r)
		var eb protocol.ErrorBody
		r.decode(t, &eb)
		require.Equal(t, tc.code, eb.Error.Code, "%s %s %v", tc.method, tc.path, tc.body)
	}
	r := b.do(t, "PATCH", msgPath(cid, hi.Seq), map[string]any{"change_id": uuid.NewString(), "body": "x"},
		"Idempotency-Key", uuid.NewString())
	require.Equal(t, 400, r.status, "change_id and Idempotency-Key differ: %s", r)

	// A reply, then the creator deletes b's message (moderation).
	re := a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid),
		map[string]any{"msg_id": uuid.NewString(), "body": "re", "reply_to": hi.Seq})
	require.Equal(t, 201, re.status, "%s", re)
	var reply protocol.Message
	re.decode(t, &reply)
	require.Equal(t, hi.Seq, reply.ReplyTo)
	re = a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid),
		map[string]any{"msg_id": uuid.NewString(), "body": "re", "reply_to": 999})
	require.Equal(t, 400, re.status, "a reply to no message: %s", re)

	key := uuid.NewString()
	r = a.do(t, "DELETE", msgPath(cid, hi.Seq), nil, "Idempotency-Key", key)
	require.Equal(t, 200, r.status, "%s", r)
	m = protocol.Message{}
	r.decode(t, &m)
	require.True(t, m.Deleted)
	require.Equal(t, `""`, string(m.Body))
	require.Empty(t, m.Reactions)
	b.change(t, "PATCH", msgPath(cid, hi.Seq), map[string]any{"change_id": uuid.NewString(), "body": "back"}, 400)
	b.change(t, "PUT", msgPath(cid, hi.Seq)+"/reaction", map[string]any{"change_id": uuid.NewString(), "emoji": "👍"}, 400)
	b.change(t, "DELETE", msgPath(cid, hi.Seq), map[string]any{"change_id": uuid.NewString()}, 200)

	// Everything the other side reads shows the deletion.
	entries, _, _ = b.syncAll(t, 0, 200)
	up = lastUpdate(entries, cid, hi.Seq)
	require.True(t, up.Deleted)
	for _, e := range entries {
		if e.Message != nil && e.Message.Seq == hi.Seq {
			require.True(t, e.Message.Deleted, "every entry of the message reads its current state")
			require.Equal(t, `""`, string(e.Message.Body))
		}
	}
	h = b.history(t, cid, "")
	require.True(t, h.Messages[hi.Seq-1].Deleted)
	_, _, _ = head, cursor, c
	tg.verify(t)
}

// TestWSChanges: change frames are answered with change_ack (or an error
// frame naming the change_id), and another member's session is pushed the
// update entry.
func TestWSChanges(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{})
	a, b := w.user(t, 1), w.user(t, 2)
	cid := a.create(t, "pair", 2)
	m := a.send(t, cid, "hi")
	head := b.head(t)
	cb := dialWS(t, w, b)
	sb := cb.stream(t, head, nil)
	ca := dialWS(t, w, a)
	ca.hello(t, a.head(t), nil)
	require.Equal(t, protocol.FrameWelcome, ca.nextOf(t).Type)

	id := uuid.NewString()
	ca.writeJSON(t, protocol.Change{Type: protocol.FrameEdit, ChangeID: id, ConversationID: cid, Seq: m.Seq, Body: "hi!"})
	ack := waitFrame(t, ca, protocol.FrameChangeAck)
	require.Equal(t, id, ack.ChangeID)
	require.EqualValues(t, 2, ack.Version)
	sb.waitCursor(t, head+1)
	_, got := sb.state()
	up := lastUpdate(got, cid, m.Seq)
	require.NotNil(t, up, "b's session is pushed the update")
	require.Equal(t, "hi!", msgText(t, up))

	// A reaction from b's session, then its removal; a refused change
	// names its change_id.
	react := uuid.NewString()
	cb.writeJSON(t, protocol.Change{Type: protocol.FrameReact, ChangeID: react, ConversationID: cid, Seq: m.Seq, Emoji: "👀"})
	f := sb.waitOther(t, func(f protocol.ServerFrame) bool { return f.Type == protocol.FrameChangeAck })
	require.Equal(t, react, f.ChangeID)
	require.EqualValues(t, 3, f.Version)
	cb.writeJSON(t, protocol.Change{Type: protocol.FrameReact, ChangeID: uuid.NewString(), ConversationID: cid, Seq: m.Seq})
	f = sb.waitOther(t, func(f protocol.ServerFrame) bool { return f.Type == protocol.FrameChangeAck && f.ChangeID != react })
	require.EqualValues(t, 4, f.Version)
	bad := uuid.NewString()
	cb.writeJSON(t, protocol.Change{Type: protocol.FrameEdit, ChangeID: bad, ConversationID: cid, Seq: m.Seq, Body: "not mine"})
	f = sb.waitOther(t, func(f protocol.ServerFrame) bool { return f.Type == protocol.FrameError })
	require.Equal(t, bad, f.ChangeID)
	require.Equal(t, protocol.CodeForbidden, f.Code)
	cb.writeJSON(t, map[string]any{"type": "delete", "change_id": "x", "conversation_id": cid, "seq": m.Seq})
	f = sb.waitOther(t, func(f protocol.ServerFrame) bool { return f.Type == protocol.FrameError && f.ChangeID == "" })
	require.Equal(t, protocol.CodeBadRequest, f.Code)
	w.verify(t)
}

// waitFrame reads frames until one of type typ.
func waitFrame(t testing.TB, c *wsClient, typ string) protocol.ServerFrame {
	t.Helper()
	for {
		f := c.nextOf(t)
		if f.Type == typ {
			return f
		}
		require.NotEqual(t, protocol.FrameError, f.Type, "error frame: %s", f.ErrorMessage())
	}
}

// An offline device that comes back after its conversation's messages were
// edited, deleted and reacted to sees the final state through sync alone:
// entry by entry, and through the too-long path (the conversation list's
// last message, then history).
func TestChangesReachAnOfflineDevice(t *testing.T) {
	tg := newGateway(t, func(c *Config) { c.TooLongLag = 5 })
	a, b := tg.user(t, 1), tg.user(t, 2)
	cid := a.create(t, "pair", 2)
	m1 := a.send(t, cid, "one")
	m2 := a.send(t, cid, "two")
	_, cursor, _ := b.syncAll(t, 0, 50) // b goes offline here
	epoch := b.sync(t, "").Epoch

	a.change(t, "PATCH", msgPath(cid, m1.Seq), map[string]any{"change_id": uuid.NewString(), "body": "one!"}, 200)
	a.change(t, "PUT", msgPath(cid, m1.Seq)+"/reaction", map[string]any{"change_id": uuid.NewString(), "emoji": "👍"}, 200)
	a.change(t, "DELETE", msgPath(cid, m2.Seq), map[string]any{"change_id": uuid.NewString()}, 200)

	// Entry by entry (lag 3, under the too-long lag).
	entries, _, _ := b.syncAll(t, cursor, 50)
	require.Equal(t, "one!", msgText(t, lastUpdate(entries, cid, m1.Seq)))
	require.Equal(t, []protocol.Reaction{{Emoji: "👍", Count: 1}}, lastUpdate(entries, cid, m1.Seq).Reactions)
	require.True(t, lastUpdate(entries, cid, m2.Seq).Deleted)

	// Through too long: more happens than the lag allows.
	for i := range 6 {
		a.send(t, cid, fmt.Sprintf("later %d", i))
	}
	a.change(t, "DELETE", msgPath(cid, m1.Seq), map[string]any{"change_id": uuid.NewString()}, 200)
	s := b.sync(t, fmt.Sprintf("after=%d&epoch=%d", cursor, epoch))
	require.True(t, s.TooLong)
	h := b.history(t, cid, "")
	byseq := map[int64]protocol.Message{}
	for _, m := range h.Messages {
		byseq[m.Seq] = m
	}
	require.True(t, byseq[m1.Seq].Deleted, "history shows the final state")
	require.Empty(t, byseq[m1.Seq].Reactions)
	require.True(t, byseq[m2.Seq].Deleted)
	require.Equal(t, `""`, string(byseq[m2.Seq].Body))
	// The conversation list's last message is the current one, as it is.
	r := b.do(t, "GET", "/v1/conversations", nil)
	var list protocol.ConversationList
	r.decode(t, &list)
	require.Len(t, list.Conversations, 1)
	last := list.Conversations[0].LastMessage
	require.Equal(t, "later 5", msgText(t, last))
	a.change(t, "DELETE", msgPath(cid, last.Seq), map[string]any{"change_id": uuid.NewString()}, 200)
	r = b.do(t, "GET", "/v1/conversations", nil)
	list = protocol.ConversationList{}
	r.decode(t, &list)
	require.True(t, list.Conversations[0].LastMessage.Deleted, "the list shows a deleted last message as deleted")
	tg.verify(t)
}

// A change_id names one change of one message: used again for another
// message (or conversation), it is refused, as a msg_id is (the fuzzer found
// the reuse answered 500).
func TestChangeIDReused(t *testing.T) {
	tg := newGateway(t, nil)
	a := tg.user(t, 1)
	cid := a.create(t, "solo")
	m1, m2 := a.send(t, cid, "one"), a.send(t, cid, "two")
	id := uuid.NewString()
	a.change(t, "PATCH", msgPath(cid, m1.Seq), map[string]any{"change_id": id, "body": "one!"}, 200)
	for _, tc := range []struct {
		method, path string
		body         map[string]any
		status       int
	}{
		{"PATCH", msgPath(cid, m2.Seq), map[string]any{"change_id": id, "body": "x"}, 400},
		{"PATCH", msgPath(cid, 99), map[string]any{"change_id": id, "body": "x"}, 400},
		{"PUT", msgPath(cid, m2.Seq) + "/reaction", map[string]any{"change_id": id, "emoji": "👍"}, 400},
		{"DELETE", msgPath(cid, m2.Seq), map[string]any{"change_id": id}, 400},
		{"PATCH", msgPath(999999, 1), map[string]any{"change_id": id, "body": "x"}, 404},
	} {
		r := a.do(t, tc.method, tc.path, tc.body)
		require.Equal(t, tc.status, r.status, "%s %s: %s", tc.method, tc.path, r)
	}
	// The retry of the change itself still answers the message.
	m := a.change(t, "PATCH", msgPath(cid, m1.Seq), map[string]any{"change_id": id, "body": "one!"}, 200)
	require.Equal(t, "one!", msgText(t, &m))
	h := a.history(t, cid, "")
	require.Equal(t, "two", msgText(t, &h.Messages[len(h.Messages)-1]), "nothing changed the other message")
	tg.verify(t)
}
