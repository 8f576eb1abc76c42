package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// TestSlowModeAndFrozenOverWebSocket: a send frame within the slow mode
// is answered as over HTTP, an error frame rate_limited with
// retry_after_ms and the msg_id; in a frozen conversation a member's send
// frame is a forbidden error and its typing is dropped, while the owner's
// goes through.
func TestSlowModeAndFrozenOverWebSocket(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{})
	owner, admin, member := w.user(t, 1), w.user(t, 2), w.user(t, 4)
	cid := owner.create(t, "ws settings", 2, 4)
	require.Equal(t, http.StatusAccepted, owner.setRole(t, cid, 2, "admin").status)
	require.Equal(t, http.StatusAccepted, admin.update(t, cid, `{"slow_mode": 600}`).status)
	s4, s2, s1 := connect(t, w, member), connect(t, w, admin), connect(t, w, owner)

	send := func(msgID string) protocol.ServerFrame {
		s4.c.writeJSON(t, map[string]any{"type": protocol.FrameSend, "conversation_id": cid, "msg_id": msgID, "body": "x"})
		return s4.waitOther(t, func(f protocol.ServerFrame) bool {
			return (f.Type == protocol.FrameSendAck || f.Type == protocol.FrameError) && f.MsgID == msgID
		})
	}
	first := uuid.NewString()
	require.Equal(t, protocol.FrameSendAck, send(first).Type)
	f := send(uuid.NewString())
	require.Equal(t, protocol.FrameError, f.Type)
	require.Equal(t, protocol.CodeRateLimited, f.Code)
	require.True(t, f.Retryable)
	require.Greater(t, f.RetryAfterMS, int64(590_000), "the time until the member may send: %+v", f)
	require.Equal(t, protocol.FrameSendAck, send(first).Type, "a retry of the admitted send")

	require.Equal(t, http.StatusAccepted, admin.update(t, cid, `{"frozen": true}`).status)
	s4.c.writeJSON(t, protocol.Typing{Type: protocol.FrameTyping, ConversationID: cid})
	f = send(uuid.NewString()) // answered after the typing frame before it was handled
	require.Equal(t, protocol.FrameError, f.Type)
	require.Equal(t, protocol.CodeForbidden, f.Code)
	require.True(t, strings.Contains(string(f.Message), "is frozen"), "%s", f.Message)

	s1.c.writeJSON(t, protocol.Typing{Type: protocol.FrameTyping, ConversationID: cid})
	s2.waitEphemeral(t, "the owner's typing", func(f protocol.ServerFrame) bool { return f.Type == protocol.FrameTyping && f.UserID == 1 })
	for _, f := range s2.ephemeralFrames() {
		require.False(t, f.Type == protocol.FrameTyping && f.UserID == 4, "a member's typing in a frozen conversation is dropped: %+v", f)
	}
}
