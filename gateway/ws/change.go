package ws

import (
	"errors"
	"log/slog"
	"time"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
	"github.com/inboxd/inboxd/protocol"
)

// The session's changes of messages: an edit, delete or react frame goes
// through Deps.Changer, the path of the HTTP routes, and is answered with
// change_ack or an error frame naming its change_id.

// change makes the change of in in its own goroutine, on the session's
// context, within the session's send slots and send bucket.
func (s *session) change(in *protocol.ClientFrame) {
	changeID, _ := input.ParseMsgID(in.ChangeID)
	fail := func(err error) { s.pushControl(changeErrorFrame(err, changeID), protocol.FrameError) }
	req, err := changeRequest(in)
	if err != nil {
		fail(err)
		return
	}
	if st := s.ws.deps.SendLimits.Take(s.user, time.Now()); !st.Allowed() {
		fail(st.Err())
		return
	}
	if !s.acquireSlot() {
		return
	}
	ctx := s.ctx
	s.sends.Add(1)
	go func() {
		defer s.sends.Done()
		defer s.releaseSlot()
		m, pending, err := s.ws.deps.Changer.Change(ctx, s.user, req)
		if err != nil {
			if errors.Is(err, apierr.ErrClientGone) || ctx.Err() != nil {
				return
			}
			if e := apierr.From(err); e.Code == protocol.CodeInternal || e.Err != nil {
				s.logAt(slog.LevelWarn, "WebSocket change failed", "conversation_id", req.ConversationID, "seq", req.Seq,
					"change_id", req.ChangeID, "err", err)
			}
			fail(err)
			return
		}
		ack := protocol.ChangeAck{Type: protocol.FrameChangeAck, ChangeID: req.ChangeID, ConversationID: req.ConversationID,
			Seq: req.Seq, Pending: pending}
		if m != nil {
			ack.Version = m.CurrentVersion()
		}
		s.pushControl(encodeFrame(ack), protocol.FrameChangeAck)
	}()
}

// changeRequest reads a change frame: edit (body), delete, react (emoji;
// empty or absent removes the reaction).
func changeRequest(in *protocol.ClientFrame) (ChangeRequest, error) {
	req := ChangeRequest{ChangeID: in.ChangeID, ConversationID: in.ConversationID, Seq: in.Seq}
	if in.ChangeID == "" {
		return req, apierr.BadRequest("change_id is required")
	}
	id, err := input.ParseMsgID(in.ChangeID)
	if err != nil {
		return req, apierr.BadRequest("change_id must be a uuid")
	}
	req.ChangeID = id
	if in.ConversationID <= 0 || in.Seq <= 0 {
		return req, apierr.BadRequest("conversation_id and seq must be positive integers")
	}
	switch in.Type {
	case protocol.FrameEdit:
		if in.Body == nil {
			return req, apierr.BadRequest("body is required")
		}
		req.Type, req.Body = events.MessageEdited, *in.Body
	case protocol.FrameDelete:
		req.Type = events.MessageDeleted
	case protocol.FrameReact:
		req.Type = events.ReactionRemoved
		if in.Emoji != nil && *in.Emoji != "" {
			req.Type, req.Emoji = events.ReactionAdded, *in.Emoji
		}
	}
	return req, nil
}
