package ws

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/ratelimit"
	"github.com/inboxd/inboxd/protocol"
)

// The session's sends and changes (docs/websocket.md, "Sends"): each frame
// is answered with an ack or an error frame naming it, and the connection
// stays open. MaxInflightSends 1 runs them one after the other, so that
// each answer is the next reply.

const msgID = "0f8fad5b-d9cb-469f-a165-70867728950e"

// TestSend: what a send frame becomes (the request the send path gets)
// and how each outcome of the send path is answered; all before any hello.
func TestSend(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frame  map[string]any
		answer func(ctx context.Context, c sendCall) (int64, bool, error)
		want   SendRequest // what the send path got; zero: not called
		// the answer: a send_ack of seq, or an error frame
		seq        int64
		code       string
		msgID      string
		retryAfter int64
	}{
		{name: "projected",
			frame: map[string]any{"conversation_id": 4, "msg_id": msgID, "body": "hi", "reply_to": 2, "mentions": []int64{7}, "mention_all": true},
			want:  SendRequest{ConversationID: 4, MsgID: msgID, Body: "hi", ReplyTo: 2, Mentions: []int64{7}, MentionAll: true},
			seq:   41},
		{name: "the msg_id is normalised",
			frame: map[string]any{"conversation_id": 4, "msg_id": "0F8FAD5B-D9CB-469F-A165-70867728950E", "body": "hi"},
			want:  SendRequest{ConversationID: 4, MsgID: msgID, Body: "hi"},
			seq:   41},
		{name: "appended, not projected in time",
			frame:  map[string]any{"conversation_id": 4, "msg_id": msgID, "body": "hi"},
			answer: func(context.Context, sendCall) (int64, bool, error) { return 0, true, nil },
			want:   SendRequest{ConversationID: 4, MsgID: msgID, Body: "hi"},
			code:   protocol.CodeUnavailable, msgID: msgID, retryAfter: 1000},
		{name: "not a member",
			frame:  map[string]any{"conversation_id": 4, "msg_id": msgID, "body": "hi"},
			answer: func(context.Context, sendCall) (int64, bool, error) { return 0, false, apierr.NotMember("no") },
			want:   SendRequest{ConversationID: 4, MsgID: msgID, Body: "hi"},
			code:   protocol.CodeNotMember, msgID: msgID},
		{name: "too large",
			frame:  map[string]any{"conversation_id": 4, "msg_id": msgID, "body": "hi"},
			answer: func(context.Context, sendCall) (int64, bool, error) { return 0, false, apierr.TooLarge("big") },
			want:   SendRequest{ConversationID: 4, MsgID: msgID, Body: "hi"},
			code:   protocol.CodePayloadTooLarge, msgID: msgID},
		{name: "the send path failed",
			frame:  map[string]any{"conversation_id": 4, "msg_id": msgID, "body": "hi"},
			answer: func(context.Context, sendCall) (int64, bool, error) { return 0, false, errors.New("kafka down") },
			want:   SendRequest{ConversationID: 4, MsgID: msgID, Body: "hi"},
			code:   protocol.CodeInternal, msgID: msgID},
		{name: "no msg_id", frame: map[string]any{"conversation_id": 4, "body": "hi"}, code: protocol.CodeBadRequest},
		{name: "a msg_id that is no uuid", frame: map[string]any{"conversation_id": 4, "msg_id": "nope", "body": "hi"}, code: protocol.CodeBadRequest},
		{name: "no conversation", frame: map[string]any{"msg_id": msgID, "body": "hi"}, code: protocol.CodeBadRequest, msgID: msgID},
		{name: "no body", frame: map[string]any{"conversation_id": 4, "msg_id": msgID}, code: protocol.CodeBadRequest, msgID: msgID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, serverOpts{cfg: Config{MaxInflightSends: 1}})
			answer := tc.answer
			if answer == nil {
				answer = func(context.Context, sendCall) (int64, bool, error) { return 41, false, nil }
			}
			ts.sender.answerWith(answer)
			c := ts.dial(5)
			frame := map[string]any{"type": protocol.FrameSend}
			for k, v := range tc.frame {
				frame[k] = v
			}
			c.write(frame)
			f := c.next()
			if tc.want.MsgID != "" {
				call := <-ts.sender.calls
				require.Equal(t, int64(5), call.user)
				require.Equal(t, tc.want, call.req)
			} else {
				require.Zero(t, ts.sender.called(), "refused before the send path")
			}
			if tc.code == "" {
				require.Equal(t, protocol.FrameSendAck, f.Type, f.raw)
				require.Equal(t, tc.want.MsgID, f.MsgID)
				require.Equal(t, tc.want.ConversationID, f.ConversationID)
				require.Equal(t, tc.seq, f.Seq)
			} else {
				require.Equal(t, protocol.FrameError, f.Type, f.raw)
				require.Equal(t, tc.code, f.Code, f.ErrorMessage())
				if tc.msgID != "" {
					require.Equal(t, tc.msgID, f.MsgID)
				}
				require.Equal(t, tc.retryAfter, f.RetryAfterMS)
			}
			// The connection stays open.
			c.write(map[string]any{"type": "ping"})
			require.Equal(t, protocol.FramePong, c.next().Type)
		})
	}
}

// TestSendClientGone: a send whose client went away (ErrClientGone)
// is answered with nothing: the next reply is the next send's.
func TestSendClientGone(t *testing.T) {
	ts := newTestServer(t, serverOpts{cfg: Config{MaxInflightSends: 1}})
	ts.sender.answerWith(func(_ context.Context, c sendCall) (int64, bool, error) {
		if c.req.Body == "gone" {
			return 0, false, apierr.ErrClientGone
		}
		return 9, false, nil
	})
	c := ts.dial(5)
	c.write(map[string]any{"type": "send", "conversation_id": 4, "msg_id": msgID, "body": "gone"})
	c.write(map[string]any{"type": "send", "conversation_id": 4, "msg_id": "1f8fad5b-d9cb-469f-a165-70867728950e", "body": "there"})
	f := c.next()
	require.Equal(t, protocol.FrameSendAck, f.Type)
	require.Equal(t, "1f8fad5b-d9cb-469f-a165-70867728950e", f.MsgID)
}

// TestSendRateLimited: each send spends a token of the user's send bucket;
// an empty bucket is a rate_limited error naming the send, with when to
// retry, and the send path is not asked.
func TestSendRateLimited(t *testing.T) {
	ts := newTestServer(t, serverOpts{sendLimits: ratelimit.New(rate.Every(time.Hour), 1)})
	c := ts.dial(5)
	c.write(map[string]any{"type": "send", "conversation_id": 4, "msg_id": msgID, "body": "1"})
	require.Equal(t, protocol.FrameSendAck, c.next().Type)
	other := "2f8fad5b-d9cb-469f-a165-70867728950e"
	c.write(map[string]any{"type": "send", "conversation_id": 4, "msg_id": other, "body": "2"})
	f := c.next()
	require.Equal(t, protocol.FrameError, f.Type)
	require.Equal(t, protocol.CodeRateLimited, f.Code)
	require.Equal(t, other, f.MsgID)
	require.Positive(t, f.RetryAfterMS)
	require.Equal(t, int64(1), ts.sender.called())

	// A change spends from the same bucket.
	c.write(map[string]any{"type": "delete", "change_id": other, "conversation_id": 4, "seq": 1})
	f = c.next()
	require.Equal(t, protocol.CodeRateLimited, f.Code)
	require.Equal(t, other, f.ChangeID)
}

// TestSendBackpressure: while MaxInflightSends sends run, the next frame
// is not read: a ping behind a blocked send is answered only once the
// send has finished, after its ack.
func TestSendBackpressure(t *testing.T) {
	ts := newTestServer(t, serverOpts{cfg: Config{MaxInflightSends: 1}})
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	ts.sender.answerWith(func(ctx context.Context, c sendCall) (int64, bool, error) {
		select {
		case <-release[c.req.Body]:
		case <-ctx.Done():
			return 0, false, apierr.ErrClientGone
		}
		return map[string]int64{"a": 1, "b": 2}[c.req.Body], false, nil
	})
	c := ts.dial(5)
	c.write(map[string]any{"type": "send", "conversation_id": 4, "msg_id": msgID, "body": "a"})
	c.write(map[string]any{"type": "send", "conversation_id": 4, "msg_id": "1f8fad5b-d9cb-469f-a165-70867728950e", "body": "b"})
	c.write(map[string]any{"type": "ping"})
	require.Equal(t, "a", (<-ts.sender.calls).req.Body)
	require.Empty(t, ts.sender.calls, "the second send waits for a slot")
	close(release["a"])
	f := c.next()
	require.Equal(t, protocol.FrameSendAck, f.Type)
	require.Equal(t, int64(1), f.Seq)
	require.Equal(t, "b", (<-ts.sender.calls).req.Body)
	require.Equal(t, protocol.FramePong, c.next().Type, "the ping was read after the first send ended")
	close(release["b"])
	f = c.next()
	require.Equal(t, protocol.FrameSendAck, f.Type)
	require.Equal(t, int64(2), f.Seq)
}

// TestChange: edit, delete and react frames become the change requests of
// the HTTP routes, answered with change_ack (the message's version, or
// pending) or an error frame naming the change_id.
func TestChange(t *testing.T) {
	const id = "3f8fad5b-d9cb-469f-a165-70867728950e"
	for _, tc := range []struct {
		name    string
		frame   map[string]any
		answer  func(c changeCall) (*protocol.Message, bool, error)
		want    ChangeRequest // zero: the change path is not asked
		version int64
		pending bool
		code    string
	}{
		{name: "edit", frame: map[string]any{"type": "edit", "change_id": id, "conversation_id": 4, "seq": 3, "body": "new"},
			want: ChangeRequest{Type: events.MessageEdited, ChangeID: id, ConversationID: 4, Seq: 3, Body: "new"}, version: 2},
		{name: "delete", frame: map[string]any{"type": "delete", "change_id": id, "conversation_id": 4, "seq": 3},
			want: ChangeRequest{Type: events.MessageDeleted, ChangeID: id, ConversationID: 4, Seq: 3}, version: 2},
		{name: "react", frame: map[string]any{"type": "react", "change_id": id, "conversation_id": 4, "seq": 3, "emoji": "👍"},
			want: ChangeRequest{Type: events.ReactionAdded, ChangeID: id, ConversationID: 4, Seq: 3, Emoji: "👍"}, version: 2},
		{name: "react with an empty emoji removes", frame: map[string]any{"type": "react", "change_id": id, "conversation_id": 4, "seq": 3, "emoji": ""},
			want: ChangeRequest{Type: events.ReactionRemoved, ChangeID: id, ConversationID: 4, Seq: 3}, version: 2},
		{name: "react without an emoji removes", frame: map[string]any{"type": "react", "change_id": id, "conversation_id": 4, "seq": 3},
			want: ChangeRequest{Type: events.ReactionRemoved, ChangeID: id, ConversationID: 4, Seq: 3}, version: 2},
		{name: "pending", frame: map[string]any{"type": "delete", "change_id": id, "conversation_id": 4, "seq": 3},
			answer:  func(changeCall) (*protocol.Message, bool, error) { return nil, true, nil },
			want:    ChangeRequest{Type: events.MessageDeleted, ChangeID: id, ConversationID: 4, Seq: 3},
			pending: true},
		{name: "refused", frame: map[string]any{"type": "edit", "change_id": id, "conversation_id": 4, "seq": 3, "body": "x"},
			answer: func(changeCall) (*protocol.Message, bool, error) { return nil, false, apierr.Forbidden("not yours") },
			want:   ChangeRequest{Type: events.MessageEdited, ChangeID: id, ConversationID: 4, Seq: 3, Body: "x"},
			code:   protocol.CodeForbidden},
		{name: "no change_id", frame: map[string]any{"type": "delete", "conversation_id": 4, "seq": 3}, code: protocol.CodeBadRequest},
		{name: "a change_id that is no uuid", frame: map[string]any{"type": "delete", "change_id": "x", "conversation_id": 4, "seq": 3}, code: protocol.CodeBadRequest},
		{name: "no seq", frame: map[string]any{"type": "delete", "change_id": id, "conversation_id": 4}, code: protocol.CodeBadRequest},
		{name: "no conversation", frame: map[string]any{"type": "delete", "change_id": id, "seq": 3}, code: protocol.CodeBadRequest},
		{name: "edit without a body", frame: map[string]any{"type": "edit", "change_id": id, "conversation_id": 4, "seq": 3}, code: protocol.CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, serverOpts{})
			if tc.answer != nil {
				ts.changer.answerWith(tc.answer)
			}
			c := ts.dial(6)
			c.write(tc.frame)
			f := c.next()
			if tc.want.Type != "" {
				call := <-ts.changer.calls
				require.Equal(t, int64(6), call.user)
				require.Equal(t, tc.want, call.req)
			} else {
				require.Empty(t, ts.changer.calls)
			}
			if tc.code != "" {
				require.Equal(t, protocol.FrameError, f.Type, f.raw)
				require.Equal(t, tc.code, f.Code)
				if tc.frame["change_id"] == id {
					require.Equal(t, id, f.ChangeID)
				}
				return
			}
			require.Equal(t, protocol.FrameChangeAck, f.Type, f.raw)
			require.Equal(t, id, f.ChangeID)
			require.Equal(t, int64(4), f.ConversationID)
			require.Equal(t, int64(3), f.Seq)
			require.Equal(t, tc.version, f.Version)
			require.Equal(t, tc.pending, f.Pending)
		})
	}
}
