package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/inboxd/inboxd/protocol"
)

// The WebSocket transport: one connection is one session. The session loop
// (Client.runWS) owns the connection's stream: it hands entries to the
// sequencer, applies too_long, watches heartbeats and repairs gaps over
// HTTP. A reader goroutine only decodes frames; sends from the outbox
// write their frames beside the loop and wait for their replies.

var (
	// errNoWebSocket: the gateway (or a proxy in front) does not do
	// WebSocket upgrades; TransportAuto long-polls instead.
	errNoWebSocket = errors.New("client: WebSocket upgrade refused")
	// errSessionClosed: a send was under way on a connection that ended.
	errSessionClosed = errors.New("client: WebSocket session closed")
	// errSendTimeout: no reply to a send within SendTimeout.
	errSendTimeout = errors.New("client: no reply to a WebSocket send in time")
	// errStale: nothing arrived for much longer than the heartbeat.
	errStale = errors.New("client: WebSocket silent past its heartbeat")
)

// frameError is the *APIError of an error frame (protocol.ServerFrame).
func frameError(f *protocol.ServerFrame, op string) *APIError {
	return &APIError{Op: op, Status: statusOfCode(f.Code), Code: f.Code, Retryable: f.Retryable,
		RetryAfter: time.Duration(f.RetryAfterMS) * time.Millisecond, Message: f.ErrorMessage()}
}

// statusOfCode maps an error code of docs/protocol.md to its HTTP status, so that
// WebSocket and HTTP refusals are classified alike.
func statusOfCode(code string) int {
	switch code {
	case CodeBadRequest:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeNotMember, CodeForbidden:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeRateLimited:
		return http.StatusTooManyRequests
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

type wsReply struct {
	f   *protocol.ServerFrame
	err error
}

// wsSession is the client side of one connection.
type wsSession struct {
	c    *Client
	conn *websocket.Conn

	wmu sync.Mutex // one writer at a time

	mu     sync.Mutex
	acks   map[string]chan wsReply // sends waiting for their reply, by msg_id
	closed bool
	done   chan struct{} // closed when the session ends

	idle int64 // read idle limit in ns (under mu): RequestTimeout until the welcome, then from the heartbeat
}

// runWS runs one WebSocket session until it fails or ctx ends. up is
// called when the welcome arrives.
func (c *Client) runWS(ctx context.Context, up func()) error {
	tok, err := c.api.token(ctx)
	if err != nil {
		return fmt.Errorf("token for the WebSocket: %w", err)
	}
	hdr := http.Header{}
	if tok != "" {
		hdr.Set("Authorization", "Bearer "+tok)
	}
	dctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	conn, resp, err := c.cfg.Dialer.DialContext(dctx, c.wsURL, hdr)
	cancel()
	if err != nil {
		return handshakeError(err, resp)
	}
	conn.SetReadLimit(maxAnswerBytes)
	s := &wsSession{c: c, conn: conn, acks: map[string]chan wsReply{}, done: make(chan struct{}),
		idle: int64(c.cfg.RequestTimeout)}
	defer s.end()
	return s.run(ctx, up)
}

// handshakeError classifies a failed upgrade: 429/5xx are temporary (with
// their Retry-After), 401 stops, any other answer means no WebSocket here
// (a proxy that does not pass upgrades): long-poll instead. The HTTP
// sync is the judge of the client's other permanent errors.
func handshakeError(err error, resp *http.Response) error {
	if resp == nil {
		return fmt.Errorf("GET /v1/ws: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	ae := &APIError{Op: "GET /v1/ws", Status: resp.StatusCode,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var eb protocol.ErrorBody
	if json.Unmarshal(raw, &eb) == nil {
		ae.Code, ae.Message, ae.Retryable = eb.Error.Code, eb.Error.Message, eb.Error.Retryable
		ae.noteRetryAfterMS(eb.Error.RetryAfterMS)
	} else {
		ae.Message = strings.TrimSpace(string(raw))
	}
	switch {
	case ae.Temporary(), resp.StatusCode == http.StatusUnauthorized:
		return ae
	}
	return fmt.Errorf("%w: %w", errNoWebSocket, ae)
}

func (s *wsSession) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.conn.SetWriteDeadline(time.Now().Add(s.c.cfg.RequestTimeout))
	return s.conn.WriteMessage(websocket.TextMessage, b)
}

// end closes the connection and fails the sends waiting on it.
func (s *wsSession) end() {
	s.c.mu.Lock()
	if s.c.sess == s {
		s.c.sess = nil
	}
	s.c.mu.Unlock()
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.mu.Unlock()
	_ = s.conn.Close()
}

// idleForHeartbeat is how long a connection may stay silent when the
// server sends a heartbeat every hbMS milliseconds (jittered).
func (c *Client) idleForHeartbeat(hbMS int64) time.Duration {
	hb := time.Duration(hbMS) * time.Millisecond
	return 2*hb + hb/2 + c.cfg.HeadWait
}

func (s *wsSession) setIdle(d time.Duration) {
	s.mu.Lock()
	s.idle = int64(d)
	s.mu.Unlock()
}

func (s *wsSession) idleLimit() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Duration(s.idle)
}

// readLoop decodes frames for the session loop. Replies to sends go
// straight to their waiters. It ends with the connection, reporting why on
// errc: a *CloseError for a close frame (with the error frame before it).
func (s *wsSession) readLoop(frames chan<- *protocol.ServerFrame, errc chan<- error) {
	var lastErr *protocol.ServerFrame // the error frame without msg_id before a close
	extend := func() { _ = s.conn.SetReadDeadline(time.Now().Add(s.idleLimit())) }
	s.conn.SetPingHandler(func(data string) error {
		extend()
		err := s.conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	for {
		extend()
		_, raw, err := s.conn.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				out := &CloseError{Code: ce.Code, Reason: ce.Text}
				if lastErr != nil {
					out.Frame = frameError(lastErr, "websocket")
					out.RetryAfter = out.Frame.RetryAfter
				}
				err = out
			} else if isTimeout(err) {
				err = fmt.Errorf("%w: %w", errStale, err)
			}
			errc <- err
			return
		}
		f := &protocol.ServerFrame{}
		if err := json.Unmarshal(raw, f); err != nil {
			s.c.log.Warn("undecodable WebSocket frame", "err", err)
			continue
		}
		switch {
		case f.Type == protocol.FrameSendAck || (f.Type == protocol.FrameError && f.MsgID != ""):
			s.mu.Lock()
			ch := s.acks[f.MsgID]
			delete(s.acks, f.MsgID)
			s.mu.Unlock()
			if ch != nil {
				ch <- wsReply{f: f}
			}
			continue
		case f.Type == protocol.FrameError:
			lastErr = f
			s.c.log.Info("WebSocket error frame", "code", f.Code, "message", f.ErrorMessage())
		case f.Type == protocol.FramePong:
			continue
		case f.Type == protocol.FrameTyping || f.Type == protocol.FramePresence:
			s.c.ephemeralFrame(f)
			continue
		case f.Type == protocol.FrameWelcome && f.HeartbeatMS > 0:
			// Raise the idle limit here, before the next read arms its
			// deadline: the session loop setting it later would leave this
			// read with the pre-welcome limit, shorter than a heartbeat.
			s.setIdle(s.c.idleForHeartbeat(f.HeartbeatMS))
		}
		select {
		case frames <- f:
		case <-s.done:
			return
		}
	}
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// run is the session loop: it says hello, starts the reader, and hands
// each frame and repair timer to the session's stream until the
// connection fails or ctx ends.
func (s *wsSession) run(ctx context.Context, up func()) error {
	if err := s.hello(); err != nil {
		return err
	}
	frames := make(chan *protocol.ServerFrame, 16)
	errc := make(chan error, 1)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		s.readLoop(frames, errc)
	}()
	defer func() {
		s.end()
		<-readerDone
	}()

	st := &wsStream{s: s, c: s.c, seq: newSequencer(s.c), gap: newTimer(), behind: newTimer(), changes: map[int64]int64{}}
	defer st.gap.stop()
	defer st.behind.stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			s.closeNormally()
			return ctx.Err()
		case err = <-errc:
			// The reader queued every frame it read before the one
			// that ended it: handle them first, so that the entries
			// sent before a close move the cursor the next hello
			// carries (select picks among ready cases at random).
			if ferr := st.drainFrames(ctx, frames, up); ferr != nil {
				return ferr
			}
			return err
		case f := <-frames:
			err = st.frame(ctx, f, up)
		case <-st.gap.c():
			err = st.gapExpired(ctx)
		case <-st.behind.c():
			err = st.behindExpired(ctx)
		}
		if err != nil {
			return err
		}
	}
}

// hello opens the session from the saved position.
// drainFrames handles the frames already queued, without waiting.
func (st *wsStream) drainFrames(ctx context.Context, frames <-chan *protocol.ServerFrame, up func()) error {
	for {
		select {
		case f := <-frames:
			if err := st.frame(ctx, f, up); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

func (s *wsSession) hello() error {
	epoch, cursor := s.c.position()
	hello := protocol.Hello{Type: protocol.FrameHello, After: cursor, Large: true}
	if epoch > 0 {
		hello.Epoch = &epoch
	}
	if err := s.write(hello); err != nil {
		return fmt.Errorf("websocket hello: %w", err)
	}
	return nil
}

// closeNormally tells the server the client is leaving (close 1000).
func (s *wsSession) closeNormally() {
	s.wmu.Lock()
	_ = s.conn.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(time.Second))
	s.wmu.Unlock()
}

// wsStream is the inbox as one session receives it: the sequencer, the
// highest head the server announced, and the two repair timers. It is
// owned by the session loop.
type wsStream struct {
	s          *wsSession
	c          *Client
	seq        *sequencer
	serverHead int64
	gap        *timer // entries wait beyond a missing one: pull when it fires
	behind     *timer // the head is beyond the cursor: pull when it fires without progress
	behindMark int64  // the cursor when behind was armed
	welcomed   bool
	// changes is, per read-mode conversation, the change count this
	// session caught up to (from the welcome, a large frame or a messages
	// frame): a messages frame continuing it carries every change since.
	changes map[int64]int64
}

// large applies the list of read-mode conversations of a welcome, a
// too_long or a large frame.
func (st *wsStream) large(ctx context.Context, list []LargeConv) error {
	if err := st.c.largeAnswer(ctx, list); err != nil {
		return err
	}
	clear(st.changes)
	for _, h := range list {
		st.changes[h.ConversationID] = st.c.changeCount(h.ConversationID)
	}
	return nil
}

// frame handles one frame from the reader.
func (st *wsStream) frame(ctx context.Context, f *protocol.ServerFrame, up func()) error {
	c := st.c
	switch f.Type {
	case protocol.FrameWelcome:
		st.welcomed = true
		c.noteReconnect(f.Reconnect)
		c.noteCounts(f.Counts)
		c.noteEpoch(f.Epoch)
		st.serverHead = max(st.serverHead, f.Head)
		if f.HeartbeatMS > 0 {
			st.s.setIdle(c.idleForHeartbeat(f.HeartbeatMS))
		}
		c.mu.Lock()
		c.sess = st.s
		c.mu.Unlock()
		c.kickOutbox()
		up()
		if err := st.large(ctx, f.Large); err != nil {
			return err
		}
	case protocol.FrameEntries:
		if !st.welcomed {
			return errors.New("websocket: entries before welcome")
		}
		st.serverHead = max(st.serverHead, f.Head)
		gapped, err := st.seq.offer(ctx, f.Entries)
		if err != nil {
			return err
		}
		st.watch(gapped)
		return nil
	case protocol.FrameTooLong:
		st.seq.reset()
		ans := &protocol.SyncAnswer{TooLong: true, Epoch: f.Epoch, Head: f.Head, RecordVersion: f.RecordVersion,
			Conversations: f.Conversations, NextPage: f.NextPage, Counts: f.Counts, Polling: f.Polling}
		c.noteCounts(f.Counts)
		if err := c.applyTooLong(ctx, ans); err != nil {
			return err
		}
		if err := st.large(ctx, f.Large); err != nil {
			return err
		}
		st.serverHead = max(st.serverHead, f.Head)
	case protocol.FrameHeartbeat:
		st.serverHead = max(st.serverHead, f.Head)
		if f.Reconnect != nil {
			c.noteReconnect(f.Reconnect) // the window grew with the gateway's sessions
		}
	case protocol.FrameReceipt:
		c.noteReceipt(f)
		return nil
	case protocol.FrameLarge:
		if err := st.large(ctx, f.Large); err != nil {
			return err
		}
	case protocol.FrameMessages:
		cid := f.ConversationID
		k, seen := st.changes[cid]
		trusted := seen && k == c.changeCount(cid)
		if err := c.messagesFrame(ctx, f, trusted); err != nil {
			return err
		}
		st.changes[cid] = c.changeCount(cid)
	}
	st.watch(len(st.seq.buf) > 0)
	return nil
}

// gapExpired: the missing entries did not come within GapWait: pull them.
func (st *wsStream) gapExpired(ctx context.Context) error {
	st.gap.fired()
	if err := st.c.pull(ctx, st.seq); err != nil {
		return err
	}
	gapped, err := st.seq.drain(ctx)
	if err != nil {
		return err
	}
	st.watch(gapped)
	return nil
}

// behindExpired: HeadWait passed since the head went beyond the cursor.
// If the cursor has not moved since, no push came: pull.
func (st *wsStream) behindExpired(ctx context.Context) error {
	st.behind.fired()
	_, cur := st.c.position()
	if cur < st.serverHead && cur == st.behindMark {
		if err := st.c.pull(ctx, st.seq); err != nil {
			return err
		}
		if _, err := st.seq.drain(ctx); err != nil {
			return err
		}
	}
	st.watch(len(st.seq.buf) > 0)
	return nil
}

// watch arms or disarms the repair timers after a change.
func (st *wsStream) watch(gapped bool) {
	switch {
	case gapped && !st.gap.armed:
		st.gap.arm(st.c.cfg.GapWait)
	case !gapped:
		st.gap.stop()
	}
	_, cur := st.c.position()
	switch {
	case st.serverHead > cur && !st.behind.armed:
		st.behind.arm(st.c.cfg.HeadWait)
		st.behindMark = cur
	case st.serverHead <= cur:
		st.behind.stop()
	}
}

// send sends one message on the session and waits for its reply. A pending
// send (appended, not projected within the gateway's ack wait) comes back
// as a temporary unavailable error: the outbox posts it again.
func (s *wsSession) send(ctx context.Context, it OutboxItem) (*Message, error) {
	ch := make(chan wsReply, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errSessionClosed
	}
	s.acks[it.MsgID] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.acks, it.MsgID)
		s.mu.Unlock()
	}()
	err := s.write(protocol.Send{Type: protocol.FrameSend, ConversationID: it.ConversationID, MsgID: it.MsgID, Body: it.Body,
		ReplyTo: it.ReplyTo, Mentions: it.Mentions, MentionAll: it.MentionAll, Attachments: it.Attachments})
	if err != nil {
		return nil, fmt.Errorf("websocket send: %w", err)
	}
	t := time.NewTimer(s.c.cfg.SendTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		f := r.f
		if f.Type == protocol.FrameError {
			return nil, frameError(f, "websocket send")
		}
		m := &Message{}
		if len(f.Message) == 0 || json.Unmarshal(f.Message, m) != nil || m.Seq == 0 {
			// The ack carries the seq; the rest is the send's own.
			body, _ := json.Marshal(it.Body)
			m = &Message{ConversationID: it.ConversationID, Seq: f.Seq, MsgID: it.MsgID, Kind: protocol.MessageText, Body: body,
				ReplyTo: it.ReplyTo, Mentions: it.Mentions, MentionAll: it.MentionAll, Attachments: f.Attachments}
		}
		return m, nil
	case <-t.C:
		return nil, errSendTimeout
	case <-s.done:
		return nil, errSessionClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// timer is a stoppable one-shot timer whose channel is nil while unarmed.
type timer struct {
	t     *time.Timer
	armed bool
}

func newTimer() *timer { return &timer{} }

func (t *timer) arm(d time.Duration) {
	t.stop()
	t.t = time.NewTimer(d)
	t.armed = true
}

func (t *timer) stop() {
	if t.t != nil {
		t.t.Stop()
	}
	t.armed = false
}

// fired marks the timer as having fired (its channel was read).
func (t *timer) fired() { t.armed = false }

func (t *timer) c() <-chan time.Time {
	if !t.armed {
		return nil
	}
	return t.t.C
}
