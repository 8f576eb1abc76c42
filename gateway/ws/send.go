package ws

import (
	"errors"
	"log/slog"
	"time"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
	"github.com/inboxd/inboxd/protocol"
)

// The session's sends: a send frame goes through Deps.Sender, the path of
// POST .../messages, and is answered with send_ack or an error frame.

// acquireSlot takes a send slot: while MaxInflightSends sends and changes
// run, the connection's next frame is not read. False when nothing can be
// written any more (the frame is dropped).
func (s *session) acquireSlot() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.inflight >= s.ws.cfg.MaxInflightSends {
		if s.state >= stateWriteDone {
			return false
		}
		s.sendSlot.Wait()
	}
	s.inflight++
	return true
}

func (s *session) releaseSlot() {
	s.mu.Lock()
	s.inflight--
	s.sendSlot.Signal()
	s.mu.Unlock()
}

// send appends a message through the gateway's send path (the one of POST
// .../messages) in its own goroutine, on the session's context, and answers
// send_ack or error.
func (s *session) send(in *protocol.ClientFrame) {
	fail := func(err error, msgID string) { s.pushControl(errorFrame(err, msgID), protocol.FrameError) }
	if in.MsgID == "" {
		fail(apierr.BadRequest("msg_id is required"), "")
		return
	}
	msgID, err := input.ParseMsgID(in.MsgID)
	if err != nil {
		fail(err, in.MsgID)
		return
	}
	if in.ConversationID <= 0 {
		fail(apierr.BadRequest("conversation_id must be a positive integer id"), msgID)
		return
	}
	if in.Body == nil {
		fail(apierr.BadRequest("body is required"), msgID)
		return
	}
	if st := s.ws.deps.SendLimits.Take(s.user, time.Now()); !st.Allowed() {
		fail(st.Err(), msgID)
		return
	}
	if !s.acquireSlot() {
		return
	}
	ctx := s.ctx
	cid := in.ConversationID
	req := SendRequest{ConversationID: cid, MsgID: msgID, Body: *in.Body, ReplyTo: in.ReplyTo,
		Mentions: in.Mentions, MentionAll: in.MentionAll, Attachments: in.Attachments}
	s.sends.Add(1)
	go func() {
		defer s.sends.Done()
		defer s.releaseSlot()
		ans, err := s.ws.deps.Sender.Send(ctx, s.user, req)
		switch {
		case err != nil:
			if errors.Is(err, apierr.ErrClientGone) || ctx.Err() != nil {
				return
			}
			if e := apierr.From(err); e.Code == protocol.CodeInternal || e.Err != nil {
				s.logAt(slog.LevelWarn, "WebSocket send failed", "conversation_id", cid, "msg_id", msgID, "err", err)
			}
			fail(err, msgID)
		case ans.Pending:
			fail(apierr.Unavailable("the message is appended but not projected yet; send it again with the same msg_id for its seq",
				time.Second, nil), msgID)
		default:
			s.pushControl(encodeFrame(protocol.SendAck{Type: protocol.FrameSendAck, MsgID: msgID, ConversationID: cid,
				Seq: ans.Seq, Attachments: ans.Attachments}), protocol.FrameSendAck)
		}
	}()
}
