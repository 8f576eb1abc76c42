package ws

import (
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

func TestWSOrigins(t *testing.T) {
	for _, tc := range []struct {
		allowed []string
		origin  string
		host    string
		ok      bool
	}{
		{nil, "", "gw:8080", true}, // not a browser
		{nil, "http://gw:8080", "gw:8080", true},
		{nil, "http://GW:8080", "gw:8080", true},
		{nil, "http://gw:8081", "gw:8080", false},
		{nil, "https://evil.example", "gw:8080", false},
		{nil, "null", "gw:8080", false},
		{[]string{"https://app.example"}, "https://app.example", "gw:8080", true},
		{[]string{"https://app.example/"}, "https://APP.example", "gw:8080", true},
		{[]string{"https://app.example"}, "http://gw:8080", "gw:8080", false}, // a list replaces same-origin
		{[]string{"https://app.example"}, "https://app.example.evil", "gw:8080", false},
		{[]string{"*"}, "https://anything", "gw:8080", true},
	} {
		all, set := parseOrigins(tc.allowed)
		require.Equal(t, tc.ok, originAllowed(all, set, tc.origin, tc.host), "%+v", tc)
	}
}

func TestWSConfigValidate(t *testing.T) {
	var c Config
	c.setDefaults()
	require.NoError(t, c.validate())
	require.Equal(t, DefaultHeartbeat, c.HeartbeatInterval)
	require.Equal(t, 2*DefaultHeartbeat+10*time.Second, c.ReadTimeout)
	require.Equal(t, int64(64<<10), c.MaxFrameBytes)
	for _, bad := range []Config{
		{HeartbeatInterval: 1},
		{HeartbeatInterval: 20e9, ReadTimeout: 10e9},
		{QueueBytes: 100},
		{PushWorkers: -1},
		{AllowedOrigins: []string{"app.example"}},
	} {
		bad.setDefaults()
		require.Error(t, bad.validate(), "%+v", bad)
	}
}

// FuzzWSInbound: any client frame decodes to a known type or a bad_request,
// never a panic; a frame decoded with an error (a field of the wrong type,
// a string that is not text) comes back too, for its type and msg_id.
func FuzzWSInbound(f *testing.F) {
	for _, s := range []string{
		`{"type":"hello","after":12,"epoch":3}`, `{"type":"hello"}`, `{"type":"ping"}`,
		`{"type":"send","conversation_id":1,"msg_id":"0f8fad5b-d9cb-469f-a165-70867728950e","body":"hi"}`,
		`{"type":"edit","change_id":"0f8fad5b-d9cb-469f-a165-70867728950e","conversation_id":1,"seq":2,"body":"b"}`,
		`{"type":"delete"}`, `{"type":"react","emoji":"x"}`, `{"type":"typing","conversation_id":1,"state":"stop"}`,
		`{"type":"send","body":null}`, `{"type":1}`, `[]`, `{`, "\xff", `{"type":"hello","after":"x"}`,
		`{"type":"send","body":"\u0000"}`, `{"type":"ping","x":"\ud800"}`,
	} {
		f.Add(s, true)
	}
	f.Add("ping", false)
	f.Fuzz(func(t *testing.T, raw string, text bool) {
		mt := websocket.BinaryMessage
		if text {
			mt = websocket.TextMessage
		}
		in, err := decodeInbound(mt, []byte(raw))
		if err != nil {
			require.Equal(t, protocol.CodeBadRequest, apierr.From(err).Code)
			return
		}
		require.Contains(t, []string{"hello", "send", "ping", "edit", "delete", "react", "typing"}, in.Type)
	})
}

// TestLargeIndexRelistKeepsPosition: a session's list read again (at its
// registration, or on a membership change) keeps the position of a
// conversation it stays in, even as the conversation's only session: a
// message notified but not yet pushed is then pushed from that position,
// not skipped by the newer list's.
func TestLargeIndexRelistKeepsPosition(t *testing.T) {
	x := newLargeIndex(nil)
	s := &session{user: 1}
	at := func(conv, last int64) inbox.LargeMembership {
		return inbox.LargeMembership{LargeConv: protocol.LargeConv{ConversationID: conv, LastSeq: last}, JoinedSeq: 1}
	}
	x.setListLocked(s, []inbox.LargeMembership{at(7, 1)})
	x.setListLocked(s, []inbox.LargeMembership{at(7, 2), at(8, 5)})
	require.Equal(t, int64(1), x.convs[7].lastSeq, "the pushed position, not the list's")
	require.Equal(t, int64(5), x.convs[8].lastSeq, "a conversation new to the index starts at the list's")
	require.Equal(t, []int64{7, 8}, x.byConv[s])
	x.setListLocked(s, []inbox.LargeMembership{at(8, 6)})
	require.Nil(t, x.convs[7], "left: no session of 7 here any more")
	require.Equal(t, int64(5), x.convs[8].lastSeq)
	require.Equal(t, []int64{8}, x.byConv[s])
}
