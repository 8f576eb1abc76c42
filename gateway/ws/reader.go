package ws

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
	"github.com/inboxd/inboxd/protocol"
)

// The session's reader: the goroutine that reads the client's frames, the
// decoding of a frame and the hello (the first page of the catch-up).

// read is the reader goroutine. The connection is idle in NextReader; the
// frames of read and of what an idle read calls are what the connection's
// stack holds, so the work is done in other functions (readFrame,
// readSetup, readEnded), not inlined here: used below a quarter of 8 KiB,
// the stack that a hello grew is halved back to 4 KiB by the next GCs.
func (s *session) read() {
	s.readSetup()
	for {
		mt, r, err := s.conn.NextReader()
		if err != nil {
			s.readEnded(err)
			break
		}
		if !s.readFrame(mt, r) {
			break
		}
	}
	s.finish()
}

//go:noinline
func (s *session) readSetup() {
	c, cfg := s.conn, &s.ws.cfg
	c.SetReadLimit(cfg.MaxFrameBytes)
	_ = c.SetReadDeadline(time.Now().Add(cfg.ReadTimeout))
	c.SetPongHandler(func(string) error { return c.SetReadDeadline(time.Now().Add(cfg.ReadTimeout)) })
}

// readFrame reads and handles one client frame; false ends the reader.
//
//go:noinline
func (s *session) readFrame(mt int, r io.Reader) bool {
	data, err := io.ReadAll(r)
	if err != nil {
		s.readEnded(err)
		return false
	}
	_ = s.conn.SetReadDeadline(time.Now().Add(s.ws.cfg.ReadTimeout))
	s.handle(mt, data)
	return true
}

//go:noinline
func (s *session) readEnded(err error) {
	if !websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway) {
		s.logAt(slog.LevelDebug, "WebSocket read ended", "err", err)
	}
}

// handle acts on one client frame. Bad frames get an error frame and the
// connection stays open; only a bad hello closes it.
func (s *session) handle(mt int, data []byte) {
	in, err := decodeInbound(mt, data)
	if err != nil {
		s.ws.m.received.WithLabelValues("invalid").Inc()
		var msgID string
		if in != nil {
			switch in.Type {
			case protocol.FrameHello:
				// A hello that cannot be decoded is a bad hello: it
				// closes, as a bad cursor does.
				s.refuseHello(err)
				return
			case protocol.FrameSend:
				// Name the send the error answers when its id is fine.
				msgID, _ = input.ParseMsgID(in.MsgID)
			case protocol.FrameEdit, protocol.FrameDelete, protocol.FrameReact:
				changeID, _ := input.ParseMsgID(in.ChangeID)
				s.pushControl(changeErrorFrame(err, changeID), protocol.FrameError)
				return
			}
		}
		s.pushControl(errorFrame(err, msgID), protocol.FrameError)
		return
	}
	s.ws.m.received.WithLabelValues(in.Type).Inc()
	switch in.Type {
	case protocol.FrameHello:
		s.hello(in)
	case protocol.FrameSend:
		s.send(in)
	case protocol.FrameEdit, protocol.FrameDelete, protocol.FrameReact:
		s.change(in)
	case protocol.FramePing:
		s.pushControl(encodeFrame(protocol.Pong{Type: protocol.FramePong}), protocol.FramePong)
	case protocol.FrameTyping:
		s.typing(in)
	}
}

// decodeInbound decodes one client frame: a JSON text message with a known
// type, whose strings are text PostgreSQL can store (no NUL, no lone
// surrogate: checkJSONText, as for the HTTP bodies). Errors are
// bad_request; with an error, the frame is returned too when it could be
// read as far as its type (a field of the wrong type leaves the others
// decoded), so that a bad hello closes and a bad send names its msg_id.
func decodeInbound(mt int, data []byte) (*protocol.ClientFrame, error) {
	if mt != websocket.TextMessage {
		return nil, apierr.BadRequest("frames must be JSON text messages")
	}
	if !utf8.Valid(data) {
		return nil, apierr.BadRequest("frame is not valid UTF-8")
	}
	var in protocol.ClientFrame
	if err := json.Unmarshal(data, &in); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &in, apierr.BadRequest("%s", input.DescribeJSONError(err))
		}
		return nil, apierr.BadRequest("%s", input.DescribeJSONError(err))
	}
	if err := input.CheckJSONText(data); err != nil {
		return &in, err
	}
	switch in.Type {
	case protocol.FrameHello, protocol.FrameSend, protocol.FramePing,
		protocol.FrameEdit, protocol.FrameDelete, protocol.FrameReact, protocol.FrameTyping:
		return &in, nil
	}
	return nil, apierr.BadRequest("unknown frame type %q (hello, send, edit, delete, react, typing, ping)", in.Type)
}

// refuseHello answers a hello that GET /v1/sync would answer with 400 (a
// cursor or epoch that is negative, of the wrong type or beyond the head):
// the error frame HTTP's body would be, and close 1008 at once. A second
// hello, bad or not, only gets an error frame.
func (s *session) refuseHello(err error) {
	s.mu.Lock()
	first := s.takeHelloLocked()
	s.mu.Unlock()
	if !first {
		s.pushControl(errorFrame(apierr.BadRequest("hello was already received on this connection"), ""), protocol.FrameError)
		return
	}
	s.closeWith(protocol.CloseProtocol, "bad hello", errorFrame(err, ""))
}

// hello answers the client's cursor: welcome, then too_long or the first
// catch-up page, read with the rules of GET /v1/sync (inbox.Reader.Sync),
// on the session's context. The rest of the catch-up and the live entries
// come from the pusher. The hub subscription predates this read, so a
// commit after it is not missed.
func (s *session) hello(in *protocol.ClientFrame) {
	s.mu.Lock()
	first := s.takeHelloLocked()
	s.mu.Unlock()
	if !first {
		s.pushControl(errorFrame(apierr.BadRequest("hello was already received on this connection"), ""), protocol.FrameError)
		return
	}
	cfg := &s.ws.cfg
	p, err := helloQuery(in, cfg.PushBatch)
	if err != nil {
		s.closeWith(protocol.CloseProtocol, "bad hello", errorFrame(err, ""))
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	res, err := s.ws.deps.Inbox.Sync(ctx, s.user, p)
	var e *apierr.Error
	if errors.As(err, &e) && e.Code == protocol.CodeBadRequest {
		// A cursor beyond the head cannot be filled: HTTP answers 400,
		// and so does the hello, closing at once. The client's cursor
		// is corrupt; it must start again from 0 (or send its epoch, so
		// that a replay gives a clean too_long instead).
		s.closeWith(protocol.CloseProtocol, "bad hello", errorFrame(err, ""))
		return
	}
	var tl *protocol.TooLong
	if err == nil && res.TooLong {
		tl, err = s.ws.deps.Rebaser.Rebase(ctx, s.user, res)
	}
	if err == nil {
		res.Entries, err = s.maskBlocked(ctx, res.Entries) // reads the blocks even without entries: lastBlocked
	}
	if err != nil {
		s.logAt(slog.LevelWarn, "WebSocket hello failed", "err", err)
		s.closeWith(protocol.CloseInternal, "hello failed, reconnect", errorFrame(err, ""))
		return
	}

	hint := s.ws.reconnectHint()
	s.mu.Lock()
	s.startLocked()
	s.large = in.Large
	s.epoch = res.Epoch
	s.head = max(s.head, res.Head, s.sub.Head())
	s.pushDataLocked(queued{kind: protocol.FrameWelcome, b: encodeFrame(protocol.Welcome{Type: protocol.FrameWelcome, Epoch: res.Epoch, Head: res.Head,
		HeartbeatMS: cfg.HeartbeatInterval.Milliseconds(), Counts: res.Counts, Large: res.Large, Reconnect: hint})})
	if tl != nil {
		s.pushDataLocked(queued{kind: protocol.FrameTooLong, b: encodeFrame(protocol.TooLongFrame{Type: protocol.FrameTooLong, TooLong: tl})})
		s.cursor, s.head = res.Head, res.Head
	} else {
		s.cursor = p.After
		if n := len(res.Entries); n > 0 {
			s.pushDataLocked(queued{kind: protocol.FrameEntries, entries: n,
				b: entriesFrame(res.Entries, res.Head)})
			s.cursor = res.Entries[n-1].InboxSeq
		}
	}
	// Read again at once: the rest of a long catch-up, and anything
	// committed since Sync's snapshot.
	enq := s.markFetchLocked()
	s.mu.Unlock()
	if in.Large {
		// After the welcome is queued, so that every messages frame
		// follows it; what committed between the read and now the client
		// reads with ?after= (or comes with the next notification).
		s.ws.big.add(s, memberships(&res.Page))
	}
	s.wake()
	if enq {
		s.ws.push.add(s)
	}
}

// memberships is the large list of a hello's read with its joined seqs.
func memberships(p *inbox.Page) []inbox.LargeMembership {
	out := make([]inbox.LargeMembership, len(p.Large))
	for i, l := range p.Large {
		out[i] = inbox.LargeMembership{LargeConv: l}
		if i < len(p.LargeJoined) {
			out[i].JoinedSeq = p.LargeJoined[i]
		}
	}
	return out
}

// helloQuery is the sync question of a hello, limit entries at most, with
// the bounds and messages of GET /v1/sync's parameters (queryInt).
func helloQuery(in *protocol.ClientFrame, limit int) (inbox.Query, error) {
	p := inbox.Query{Limit: limit}
	if in.After != nil {
		p.After = *in.After
	}
	if p.After < 0 {
		return p, apierr.BadRequest("parameter after must be an integer in 0..%d", int64(math.MaxInt64))
	}
	if in.Epoch != nil {
		p.Epoch, p.HasEpoch = *in.Epoch, true
		if p.Epoch < 0 {
			return p, apierr.BadRequest("parameter epoch must be an integer in 0..%d", int64(math.MaxInt64))
		}
	}
	return p, nil
}
