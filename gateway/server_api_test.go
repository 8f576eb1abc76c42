package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/apikey"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/protocol"
	"github.com/inboxd/inboxd/replay"
)

// idem is the header pair of an Idempotency-Key.
func idem(k string) []string { return []string{"Idempotency-Key", k} }

// messagesOf is the messages of entries.
func messagesOf(entries []protocol.Entry) []*protocol.Message {
	var ms []*protocol.Message
	for _, e := range entries {
		if e.Kind == protocol.KindMessage {
			ms = append(ms, e.Message)
		}
	}
	return ms
}

// serverState reads a conversation's state through the server API.
func serverState(t testing.TB, svc *user, cid int64) protocol.ServerConversation {
	t.Helper()
	r := svc.do(t, "GET", fmt.Sprintf("/v1/server/conversations/%d", cid), nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var s protocol.ServerConversation
	r.decode(t, &s)
	return s
}

// TestServerAPIConversation runs every route of the server API once, and
// each again with the same Idempotency-Key (the same answer, no second
// effect), and checks the effects through the users' own API: their sync
// and history see the conversation, the system sender's message and the
// record. The invariants hold after.
func TestServerAPIConversation(t *testing.T) {
	tg := newGateway(t, serverTestConfig)
	svc, key := tg.service(t, "support", apikey.Scopes...)
	alice, bob, carol := tg.user(t, 1), tg.user(t, 2), tg.user(t, 3)

	// Create, twice with one key: one conversation.
	var first, again protocol.ConversationCreated
	r := svc.do(t, "POST", "/v1/server/conversations", protocol.CreateConversation{Title: "help", Members: []int64{1, 2}}, idem("create-1")...)
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	r.decode(t, &first)
	r = svc.do(t, "POST", "/v1/server/conversations", protocol.CreateConversation{Title: "help", Members: []int64{1, 2}}, idem("create-1")...)
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	r.decode(t, &again)
	require.Equal(t, first, again)
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
	cid := first.ConversationID
	st := serverState(t, svc, cid)
	require.Equal(t, protocol.ServerConversation{ConversationID: cid, Title: "help", LastSeq: 1, MemberCount: 2, Mode: protocol.ModeWrite}, st)
	created := messagesOf(alice.sync(t, "after=0").Entries)
	require.Len(t, created, 1, "one creation")
	sys := msgSystem(t, created[0])
	require.Equal(t, float64(0), sys["by"], "created by the service, no user")
	require.Equal(t, []any{float64(1), float64(2)}, sys["members"], "the service is no member")

	// Members in bulk, each call twice.
	for _, c := range []struct {
		path, key string
		ids       []int64
		members   int64
	}{
		{"members", "add-1", []int64{3, 4}, 4},
		{"members/remove", "remove-1", []int64{4}, 3},
	} {
		for range 2 {
			r := svc.do(t, "POST", fmt.Sprintf("/v1/server/conversations/%d/%s", cid, c.path), protocol.ServerMembers{UserIDs: c.ids}, idem(c.key)...)
			require.Equal(t, http.StatusAccepted, r.status, "%s", r)
		}
		require.Equal(t, c.members, serverState(t, svc, cid).MemberCount, c.path)
	}
	require.Equal(t, int64(4), serverState(t, svc, cid).LastSeq, "created, 2 joins, 1 removal: retries added nothing")
	require.NotEmpty(t, carol.sync(t, "after=0").Entries, "carol sees her join")

	// A system sender's message, twice: one message, the same answer.
	var m1, m2 protocol.Message
	sendPath := fmt.Sprintf("/v1/server/conversations/%d/messages", cid)
	r = svc.do(t, "POST", sendPath, protocol.ServerSend{SenderName: "Support", Body: "we are on it"}, idem("send-1")...)
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	r.decode(t, &m1)
	r = svc.do(t, "POST", sendPath, protocol.ServerSend{SenderName: "Support", Body: "we are on it"}, idem("send-1")...)
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
	r.decode(t, &m2)
	require.Equal(t, m1, m2)
	require.Equal(t, int64(0), m1.SenderID)
	require.Equal(t, "Support", m1.SenderName)
	h, hr := historyOf(t, bob, cid, "")
	require.Equal(t, http.StatusOK, hr.status, "%s", hr)
	last := h.Messages[len(h.Messages)-1]
	require.Equal(t, m1.Seq, last.Seq)
	require.Equal(t, "Support", last.SenderName)
	require.Equal(t, "we are on it", msgText(t, last))

	// As a member; as a non-member, refused.
	r = svc.do(t, "POST", sendPath, protocol.ServerSend{AsUser: 2, Body: "thanks"}, idem("send-2")...)
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	var m3 protocol.Message
	r.decode(t, &m3)
	require.Equal(t, int64(2), m3.SenderID)
	require.Empty(t, m3.SenderName)
	r = svc.do(t, "POST", sendPath, protocol.ServerSend{AsUser: 9, Body: "x"}, idem("send-3")...)
	require.Equal(t, http.StatusForbidden, r.status, "%s", r)
	require.Equal(t, protocol.CodeNotMember, errCode(t, r))

	// Alice's record, pinned for her, twice: one record change.
	before := alice.sync(t, "after=0")
	for range 2 {
		r = svc.do(t, "PATCH", fmt.Sprintf("/v1/server/users/1/conversations/%d/record", cid), map[string]any{"pinned": true}, idem("pin-1")...)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	}
	after := alice.sync(t, fmt.Sprintf("after=%d", before.Head))
	require.Len(t, after.Entries, 1, "one record entry")
	require.Equal(t, protocol.KindRecord, after.Entries[0].Kind)
	require.True(t, after.Entries[0].Record.Pinned)

	// Alice's inbox head as the server API reads it is her sync's.
	var in protocol.ServerInbox
	r = svc.do(t, "GET", "/v1/server/users/1/inbox", nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	r.decode(t, &in)
	require.Equal(t, protocol.ServerInbox{UserID: 1, Head: after.Head}, in)
	tg.verify(t)

	// The log names the service on every event: as the actor (0) where it
	// acted as itself, beside the user it acted for otherwise.
	actors := map[string]int64{}
	for _, e := range logEvents(t, tg.env, cid, events.RecordUpdated) {
		require.Equal(t, key.Actor(), e.Service, "%s", e.Type)
		actors[e.Type] = e.ActorID
		if e.Type == events.MessageSent && e.ActorID == 0 {
			require.Equal(t, "Support", e.SenderName)
		}
	}
	require.Equal(t, map[string]int64{events.ConversationCreated: 0, events.MemberAdded: 0, events.MemberRemoved: 0,
		events.MessageSent: 2, events.RecordUpdated: 1}, actors, "the last actor of each type")

	// A replay rebuilds the projections from the log (its bulk path):
	// the same conversation, the system sender's name included.
	tg.stopFanout()
	_, err := tg.env.Replay(context.Background(), replay.Config{Brokers: tg.env.Brokers, Topic: tg.env.Topic,
		Logger: tg.env.Logger, Progress: &bytes.Buffer{}})
	require.NoError(t, err)
	tg.g.inbox.ForgetAll()
	h2, _ := historyOf(t, bob, cid, "")
	require.Len(t, h2.Messages, 6, "created, 2 joins, 1 removal, 2 sends")
	require.Equal(t, last, h2.Messages[m1.Seq-1], "the system sender's message, rebuilt")
	require.Equal(t, st.ConversationID, serverState(t, svc, cid).ConversationID)
	tg.verify(t)
}

// logEvents reads the topic from its start until an event of type last
// in conversation cid, and returns cid's events up to it.
func logEvents(t testing.TB, env *testenv.Env, cid int64, last string) []*events.Event {
	t.Helper()
	var out []*events.Event
	readLog(t, env, fmt.Sprintf("%s of conversation %d", last, cid), func(e *events.Event) bool {
		if e.ConversationID != cid {
			return false
		}
		out = append(out, e)
		return e.Type == last
	})
	return out
}

// TestServerAPIBadInput: refused writes answer 4xx and change nothing.
func TestServerAPIBadInput(t *testing.T) {
	tg := newGateway(t, serverTestConfig)
	svc, _ := tg.service(t, "svc", apikey.Scopes...)
	cid := tg.user(t, 1).create(t, "a")
	send := fmt.Sprintf("/v1/server/conversations/%d/messages", cid)
	cases := []struct {
		name, method, path string
		body               any
		hdr                []string
		status             int
	}{
		{"no idempotency key", "POST", send, protocol.ServerSend{SenderName: "S", Body: "x"}, nil, 400},
		{"idempotency key with a space", "POST", send, protocol.ServerSend{SenderName: "S", Body: "x"}, idem("a b"), 400},
		{"two senders", "POST", send, protocol.ServerSend{AsUser: 1, SenderName: "S", Body: "x"}, idem("k"), 400},
		{"no sender", "POST", send, protocol.ServerSend{Body: "x"}, idem("k"), 400},
		{"create without members", "POST", "/v1/server/conversations", protocol.CreateConversation{}, idem("k"), 400},
		{"members of no conversation", "POST", "/v1/server/conversations/999999/members", protocol.ServerMembers{UserIDs: []int64{2}}, idem("k"), 404},
		{"repeated member", "POST", fmt.Sprintf("/v1/server/conversations/%d/members", cid), protocol.ServerMembers{UserIDs: []int64{2, 2}}, idem("k"), 400},
		{"record of a non-member", "PATCH", fmt.Sprintf("/v1/server/users/5/conversations/%d/record", cid), map[string]any{"muted": true}, idem("k"), 403},
		{"state of no conversation", "GET", "/v1/server/conversations/999999", nil, nil, 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := svc.do(t, c.method, c.path, c.body, c.hdr...)
			require.Equal(t, c.status, r.status, "%s", r)
		})
	}
	require.Equal(t, int64(1), serverState(t, svc, cid).LastSeq, "nothing changed")
}

// TestServerAPIReplayBulk: a replay whose batch is large enough to be
// copied (projector.copyRows: above 2,000 inbox rows) rebuilds a service's
// conversation and its system sender's messages as they were.
func TestServerAPIReplayBulk(t *testing.T) {
	tg := newGateway(t, serverTestConfig)
	svc, _ := tg.service(t, "bulk", apikey.Scopes...)
	members := make([]int64, 900)
	for i := range members {
		members[i] = int64(i + 1)
	}
	var c protocol.ConversationCreated
	r := svc.do(t, "POST", "/v1/server/conversations", protocol.CreateConversation{Title: "all hands", Members: members}, idem("c")...)
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	r.decode(t, &c)
	for i := range 3 {
		r := svc.do(t, "POST", fmt.Sprintf("/v1/server/conversations/%d/messages", c.ConversationID),
			protocol.ServerSend{SenderName: "Announcements", Body: fmt.Sprintf("notice %d", i)}, idem(fmt.Sprint("n", i))...)
		require.Equal(t, http.StatusCreated, r.status, "%s", r)
	}
	u := tg.user(t, 900)
	before, _ := historyOf(t, u, c.ConversationID, "")
	require.Len(t, before.Messages, 4)

	tg.stopFanout()
	_, err := tg.env.Replay(context.Background(), replay.Config{Brokers: tg.env.Brokers, Topic: tg.env.Topic,
		Logger: tg.env.Logger, Progress: &bytes.Buffer{}})
	require.NoError(t, err)
	tg.g.inbox.ForgetAll()
	after, _ := historyOf(t, u, c.ConversationID, "")
	require.Equal(t, before, after)
	require.Equal(t, "Announcements", after.Messages[3].SenderName)
	tg.verify(t)
}

// TestServerAPIConcurrentRetries: calls with one Idempotency-Key at once
// (a client that retried before the first answer) answer the same
// conversation and the same message, and make each once, even when their
// conversation ids, allocated before the append, land in different
// partitions.
func TestServerAPIConcurrentRetries(t *testing.T) {
	tg := newGateway(t, serverTestConfig)
	svc, _ := tg.service(t, "svc", apikey.Scopes...)
	const n = 8
	cids := make([]int64, n)
	parallel(t, n, n, func(i int) error {
		r, err := svc.doE("POST", "/v1/server/conversations", protocol.CreateConversation{Members: []int64{1, 2}}, idem("same")...)
		if err != nil || r.status != http.StatusCreated {
			return fmt.Errorf("create %d: %v %s", i, err, r)
		}
		var c protocol.ConversationCreated
		if err := decodeInto(r.body, &c); err != nil {
			return err
		}
		cids[i] = c.ConversationID
		return nil
	})
	for _, cid := range cids {
		require.Equal(t, cids[0], cid, "every call answers the conversation the key made")
	}
	seqs := make([]int64, n)
	parallel(t, n, n, func(i int) error {
		r, err := svc.doE("POST", fmt.Sprintf("/v1/server/conversations/%d/messages", cids[0]),
			protocol.ServerSend{SenderName: "S", Body: "once"}, idem("same")...)
		if err != nil || r.status != http.StatusCreated {
			return fmt.Errorf("send %d: %v %s", i, err, r)
		}
		var m protocol.Message
		if err := decodeInto(r.body, &m); err != nil {
			return err
		}
		seqs[i] = m.Seq
		return nil
	})
	for _, s := range seqs {
		require.Equal(t, int64(2), s, "one message, after the creation")
	}
	tg.env.WaitCaughtUp(t, time.Minute)
	require.Len(t, messagesOf(tg.user(t, 1).sync(t, "after=0").Entries), 2, "one creation, one message: %s", tg.user(t, 1).do(t, "GET", "/v1/sync?after=0", nil).body)
	tg.verify(t)
}
