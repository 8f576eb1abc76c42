package ws

import (
	"context"
	"log/slog"
	"time"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

// The session's typing and presence: a typing frame goes to
// Deps.Ephemeral; the typing and presence frames of others come back
// through ephemeralFrame.

// typingTimeout bounds the member check and notify of one typing frame.
const typingTimeout = 5 * time.Second

// typing handles a typing frame on the reader: in order, so that a stop
// never overtakes its start. Frames dropped by the rate limits get no
// answer; a bad frame, a non-member and a failure get an error frame. The
// connection stays open either way.
func (s *session) typing(in *protocol.ClientFrame) {
	if in.ConversationID <= 0 {
		s.pushControl(errorFrame(apierr.BadRequest("typing: conversation_id must be a positive integer"), ""), protocol.FrameError)
		return
	}
	if in.State != "" && in.State != protocol.TypingStart && in.State != protocol.TypingStop {
		s.pushControl(errorFrame(apierr.BadRequest("typing: state must be %q or %q", protocol.TypingStart, protocol.TypingStop), ""),
			protocol.FrameError)
		return
	}
	e := s.ws.deps.Ephemeral
	if e == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, typingTimeout)
	defer cancel()
	if _, err := e.Typing(ctx, s.user, in.ConversationID, in.State == protocol.TypingStop); err != nil {
		if s.ctx.Err() != nil {
			return
		}
		if ae := apierr.From(err); ae.Code == protocol.CodeInternal || ae.Err != nil {
			s.logAt(slog.LevelWarn, "WebSocket typing failed", "conversation_id", in.ConversationID, "err", err)
		}
		s.pushControl(errorFrame(err, ""), protocol.FrameError)
	}
}

// ephemeralFrame queues a typing or presence frame of another user. It
// goes into the ordered stream (so never before the welcome), and only
// while the queue has room: a lagging client misses it rather than
// waiting longer for its entries. It reports whether it was queued.
func (s *session) ephemeralFrame(kind string, frame []byte) bool {
	s.mu.Lock()
	if s.state != stateStarted || s.out.dataBytes+len(frame) > s.ws.cfg.QueueBytes/2 {
		s.mu.Unlock()
		return false
	}
	s.pushDataLocked(queued{b: frame, kind: kind})
	start := s.startWriterLocked()
	s.mu.Unlock()
	if start {
		go s.writer()
	}
	return true
}
