package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
)

// fetchState is where a session stands with the pusher: at most one read of
// its entries is pending or in flight at a time, which is what keeps its
// cursor, and so its stream, contiguous.
type fetchState uint8

const (
	fetchIdle     fetchState = iota
	fetchPending             // in the pusher's pending (or retry) list
	fetchInflight            // in a running push query
)

// queued is one encoded frame waiting for the writer.
type queued struct {
	b        []byte
	kind     string    // frame type, for the metrics
	entries  int       // entries in an entries frame
	signalAt time.Time // hub wake-up that led to it, for the push latency
}

// wsSession is one connection after its admission. The reader is the
// goroutine of ServeHTTP (run), the writer is writeLoop; everything below
// mu is shared with the pusher and the send goroutines.
type wsSession struct {
	ws     *WebSocket
	conn   *websocket.Conn
	id     uint64
	user   int64
	sub    *subscription
	log    *slog.Logger
	ctx    context.Context // ends when the reader ends
	cancel context.CancelFunc
	notify chan struct{} // cap 1: the writer has something to do
	done   chan struct{} // closed when the writer has ended

	sendSem chan struct{}
	sends   sync.WaitGroup

	mu           sync.Mutex
	helloSeen    bool // a hello arrived (set by the reader)
	started      bool // hello answered: the pusher may read
	closing      bool // a close frame is to be written
	closed       bool // the session has ended
	closeCode    int
	closeReason  string
	epoch        int64
	cursor       int64 // last inbox_seq queued
	head         int64 // highest head known (reads and notifications)
	control      []queued
	data         []queued
	dataBytes    int
	fetch        fetchState
	dirty        bool      // signalled while a read was in flight
	hbDue        bool      // a heartbeat is owed once caught up
	wantMore     bool      // a read was held back by a full queue
	laggingSince time.Time // zero unless lagging
	writeStart   time.Time // start of the write in progress, zero between writes
	signalAt     time.Time // first hub wake-up not yet answered by entries
}

func newSession(ws *WebSocket, conn *websocket.Conn, user int64) *wsSession {
	id := ws.nextID.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	return &wsSession{
		ws: ws, conn: conn, id: id, user: user,
		sub:     ws.g.hub.subscribeUser(user),
		log:     ws.log.With("conn_id", id, "user_id", user),
		ctx:     ctx,
		cancel:  cancel,
		notify:  make(chan struct{}, 1),
		done:    make(chan struct{}),
		sendSem: make(chan struct{}, ws.cfg.MaxInflightSends),
	}
}

// run serves the session until the connection ends, then waits for its
// writer and sends and releases everything it holds.
func (s *wsSession) run() {
	s.log.Debug("WebSocket session open")
	go s.writeLoop()
	s.readLoop()
	s.cancel()
	_ = s.conn.Close() // unblocks a write to a client that went away
	<-s.done
	s.sends.Wait()
	s.sub.Close()
	s.mu.Lock()
	s.closed = true
	if !s.laggingSince.IsZero() {
		s.laggingSince = time.Time{}
		s.ws.m.lagging.Dec()
	}
	s.data, s.control, s.dataBytes = nil, nil, 0
	s.mu.Unlock()
	s.log.Debug("WebSocket session closed")
}

// wake tells the writer to look at its queues.
func (s *wsSession) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// --- reader ---

func (s *wsSession) readLoop() {
	c, cfg := s.conn, &s.ws.cfg
	c.SetReadLimit(cfg.MaxFrameBytes)
	_ = c.SetReadDeadline(time.Now().Add(cfg.ReadTimeout))
	c.SetPongHandler(func(string) error { return c.SetReadDeadline(time.Now().Add(cfg.ReadTimeout)) })
	for {
		mt, data, err := c.ReadMessage()
		if err != nil {
			if !websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway) {
				s.log.Debug("WebSocket read ended", "err", err)
			}
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(cfg.ReadTimeout))
		s.handle(mt, data)
	}
}

// handle acts on one client frame. Bad frames get an error frame and the
// connection stays open; only a bad hello closes it.
func (s *wsSession) handle(mt int, data []byte) {
	in, err := decodeInbound(mt, data)
	if err != nil {
		s.ws.m.received.WithLabelValues("invalid").Inc()
		s.pushControl(errorFrame(err, ""), "error")
		return
	}
	s.ws.m.received.WithLabelValues(in.Type).Inc()
	switch in.Type {
	case "hello":
		s.hello(in)
	case "send":
		s.send(in)
	case "ping":
		s.pushControl(encodeFrame(wsPong{Type: "pong"}), "pong")
	}
}

// decodeInbound decodes one client frame: a JSON text message with a known
// type. Errors are bad_request.
func decodeInbound(mt int, data []byte) (*wsInbound, error) {
	if mt != websocket.TextMessage {
		return nil, badRequest("frames must be JSON text messages")
	}
	if !utf8.Valid(data) {
		return nil, badRequest("frame is not valid UTF-8")
	}
	var in wsInbound
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, badRequest("%s", describeJSONError(err))
	}
	switch in.Type {
	case "hello", "send", "ping":
		return &in, nil
	}
	return nil, badRequest("unknown frame type %q (hello, send, ping)", in.Type)
}

// hello answers the client's cursor: welcome, then too_long or the first
// catch-up page, read with the rules of GET /v1/sync (readSync). The rest
// of the catch-up and the live entries come from the pusher. The hub
// subscription predates this read, so a commit after it is not missed.
func (s *wsSession) hello(in *wsInbound) {
	s.mu.Lock()
	seen := s.helloSeen
	s.helloSeen = true
	s.mu.Unlock()
	if seen {
		s.pushControl(errorFrame(badRequest("hello was already received on this connection"), ""), "error")
		return
	}
	g, cfg := s.ws.g, &s.ws.cfg
	p := syncParams{limit: cfg.PushBatch}
	if in.After != nil {
		p.after = *in.After
	}
	if p.after < 0 {
		s.closeWith(closeProtocol, "bad hello", errorFrame(badRequest("after must not be negative"), ""))
		return
	}
	if in.Epoch != nil {
		p.epoch, p.hasEpoch = *in.Epoch, true
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	res, err := g.readSync(ctx, s.user, p)
	var e *Error
	if errors.As(err, &e) && e.Code == CodeBadRequest {
		// A cursor beyond the head cannot be filled. HTTP answers 400;
		// here the client is rebased with too_long rather than left to
		// reconnect with the same cursor forever.
		res, err = &syncResult{tooLong: true}, nil
		if qerr := g.pool.QueryRow(ctx, sqlUserHead, s.user).Scan(&res.epoch, &res.head, &res.recordVersion); qerr != nil {
			err = qerr
		}
	}
	var tl *tooLongResponse
	if err == nil && res.tooLong {
		tl, err = g.tooLongAnswer(ctx, s.user, res, g.cfg.PageDefault)
	}
	if err != nil {
		if s.ctx.Err() != nil {
			return
		}
		s.log.Warn("WebSocket hello failed", "err", err)
		s.closeWith(closeInternal, "hello failed, reconnect", errorFrame(err, ""))
		return
	}

	s.mu.Lock()
	s.started = true
	s.epoch = res.epoch
	s.head = max(s.head, res.head, s.sub.Head())
	s.pushDataLocked(queued{kind: "welcome", b: encodeFrame(wsWelcome{Type: "welcome", Epoch: res.epoch, Head: res.head,
		HeartbeatMS: cfg.HeartbeatInterval.Milliseconds()})})
	if tl != nil {
		s.pushDataLocked(queued{kind: "too_long", b: encodeFrame(wsTooLong{Type: "too_long", tooLongResponse: tl})})
		s.cursor, s.head = res.head, res.head
	} else {
		s.cursor = p.after
		if n := len(res.entries); n > 0 {
			s.pushDataLocked(queued{kind: "entries", entries: n,
				b: encodeFrame(wsEntries{Type: "entries", Entries: res.entries, Head: res.head})})
			s.cursor = res.entries[n-1].InboxSeq
		}
	}
	// Read again at once: the rest of a long catch-up, and anything
	// committed since readSync's snapshot.
	enq := s.markFetchLocked()
	s.mu.Unlock()
	s.wake()
	if enq {
		s.ws.push.add(s)
	}
}

// send appends a message through the gateway's send path (the one of POST
// .../messages) in its own goroutine and answers send_ack or error.
func (s *wsSession) send(in *wsInbound) {
	g := s.ws.g
	fail := func(err error, msgID string) { s.pushControl(errorFrame(err, msgID), "error") }
	if in.MsgID == "" {
		fail(badRequest("msg_id is required"), "")
		return
	}
	msgID, err := parseMsgID(in.MsgID)
	if err != nil {
		fail(err, in.MsgID)
		return
	}
	if in.ConversationID <= 0 {
		fail(badRequest("conversation_id must be a positive integer id"), msgID)
		return
	}
	if in.Body == nil {
		fail(badRequest("body is required"), msgID)
		return
	}
	if st := g.sendLimits.take(s.user, time.Now()); !st.allowed {
		fail(rateLimited(st), msgID)
		return
	}
	select {
	case s.sendSem <- struct{}{}:
	case <-s.done:
		return
	}
	cid, body := in.ConversationID, *in.Body
	s.sends.Add(1)
	go func() {
		defer s.sends.Done()
		defer func() { <-s.sendSem }()
		res, err := g.send(s.ctx, s.user, cid, msgID, body)
		switch {
		case err != nil:
			if errors.Is(err, errClientGone) || s.ctx.Err() != nil {
				return
			}
			if e := toError(err); e.Code == CodeInternal || e.Err != nil {
				s.log.Warn("WebSocket send failed", "conversation_id", cid, "msg_id", msgID, "err", err)
			}
			fail(err, msgID)
		case res.status == sendPending:
			fail(unavailable("the message is appended but not projected yet; send it again with the same msg_id for its seq",
				time.Second, nil), msgID)
		default:
			s.pushControl(encodeFrame(wsSendAck{Type: "send_ack", MsgID: msgID, ConversationID: cid,
				Seq: res.message.Seq}), "send_ack")
		}
	}()
}

// --- queues (shared) ---

// pushDataLocked queues a frame of the ordered stream (welcome, entries,
// too_long, heartbeat).
func (s *wsSession) pushDataLocked(q queued) {
	s.data = append(s.data, q)
	s.dataBytes += len(q.b)
}

// pushControl queues a reply (pong, send_ack, error); replies go before the
// stream. A client that does not read its replies is closed with 4008.
func (s *wsSession) pushControl(b []byte, kind string) {
	s.mu.Lock()
	if s.closing || s.closed {
		s.mu.Unlock()
		return
	}
	if len(s.control) >= s.ws.cfg.ControlQueue {
		s.mu.Unlock()
		s.ws.m.slowCloses.WithLabelValues("control").Inc()
		s.closeWith(CloseTooSlow, "replies not read", nil)
		return
	}
	s.control = append(s.control, queued{b: b, kind: kind})
	s.mu.Unlock()
	s.wake()
}

// closeWith makes the writer send frame (if any) and close with code; the
// queued stream is dropped (the client resumes from its cursor).
func (s *wsSession) closeWith(code int, reason string, frame []byte) {
	s.mu.Lock()
	if s.closing || s.closed {
		s.mu.Unlock()
		return
	}
	s.closing, s.closeCode, s.closeReason = true, code, reason
	if frame != nil {
		s.control = append(s.control, queued{b: frame, kind: "error"})
	}
	s.mu.Unlock()
	s.wake()
}

// markFetchLocked asks for a read of the session's entries unless one is
// pending or running (then it is redone after) or the queue is too full
// (then the writer asks again when it has drained). It reports whether the
// caller must hand the session to the pusher.
func (s *wsSession) markFetchLocked() bool {
	if !s.started || s.closing || s.closed {
		return false
	}
	switch s.fetch {
	case fetchPending:
		return false
	case fetchInflight:
		s.dirty = true
		return false
	}
	if s.dataBytes >= s.ws.cfg.QueueBytes/2 {
		s.wantMore = true
		if s.head > s.cursor {
			s.setLaggingLocked()
		}
		return false
	}
	s.fetch = fetchPending
	return true
}

func (s *wsSession) setLaggingLocked() {
	if s.laggingSince.IsZero() {
		s.laggingSince = time.Now()
		s.ws.m.lagging.Inc()
	}
}

func (s *wsSession) clearLaggingLocked() {
	if !s.laggingSince.IsZero() {
		s.laggingSince = time.Time{}
		s.ws.m.lagging.Dec()
	}
}

// --- writer ---

func (s *wsSession) writeLoop() {
	defer close(s.done)
	cfg := &s.ws.cfg
	hb := time.NewTimer(s.ws.heartbeatDelay())
	defer hb.Stop()
	hello := time.NewTimer(cfg.HelloTimeout)
	defer hello.Stop()
	for {
		select {
		case <-s.notify:
		case <-s.sub.C():
			s.hubWake()
			continue
		case <-hb.C:
			hb.Reset(s.ws.heartbeatDelay())
			if err := s.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(cfg.WriteTimeout)); err != nil {
				s.abort(err)
				return
			}
			s.heartbeatDue()
		case <-hello.C:
			s.mu.Lock()
			seen := s.helloSeen
			s.mu.Unlock()
			if !seen {
				s.closeWith(closeProtocol, "hello expected", errorFrame(badRequest("no hello within %v", cfg.HelloTimeout), ""))
			}
		case <-s.ws.stopping:
			s.closeWith(CloseServiceRestart, "service restart", nil)
		case <-s.ws.g.draining:
			s.closeWith(CloseServiceRestart, "service restart", nil)
		case <-s.ctx.Done():
			return
		}
		if !s.flush() {
			return
		}
	}
}

// hubWake handles a wake-up of the user's hub subscription.
func (s *wsSession) hubWake() {
	s.mu.Lock()
	if h := s.sub.Head(); h > s.head {
		s.head = h
	}
	if s.started && s.head > s.cursor && s.signalAt.IsZero() {
		s.signalAt = time.Now()
	}
	enq := s.markFetchLocked()
	s.mu.Unlock()
	if enq {
		s.ws.push.add(s)
	}
}

// heartbeatDue re-reads the head (and anything a lost notification left
// behind); the heartbeat frame follows the read.
func (s *wsSession) heartbeatDue() {
	s.mu.Lock()
	if !s.started {
		s.mu.Unlock()
		return
	}
	s.hbDue = true
	enq := s.markFetchLocked()
	s.mu.Unlock()
	if enq {
		s.ws.push.add(s)
	}
}

// checkSlow closes a session that has been lagging for SlowTimeout.
func (s *wsSession) checkSlow() {
	s.mu.Lock()
	since := s.laggingSince
	s.mu.Unlock()
	if !since.IsZero() && time.Since(since) > s.ws.cfg.SlowTimeout {
		s.ws.m.slowCloses.WithLabelValues("lag").Inc()
		s.log.Info("closing a WebSocket that cannot keep up", "lagging_for", time.Since(since))
		s.closeWith(CloseTooSlow, "too slow", nil)
	}
}

// flush writes the queued frames, replies first. It returns false when the
// connection is done (closed or broken).
func (s *wsSession) flush() bool {
	for {
		// Between two writes, take in the hub's news: a session that is
		// slow to write learns that entries are waiting (and so whether
		// it lags) without waiting for its queue to empty.
		select {
		case <-s.sub.C():
			s.hubWake()
		default:
		}
		s.checkSlow()
		var q queued
		var have, refetch bool
		s.mu.Lock()
		switch {
		case len(s.control) > 0:
			q, have = s.control[0], true
			s.control[0] = queued{}
			if s.control = s.control[1:]; len(s.control) == 0 {
				s.control = nil
			}
		case s.closing:
			code, reason := s.closeCode, s.closeReason
			s.data, s.dataBytes = nil, 0
			s.mu.Unlock()
			s.writeClose(code, reason)
			return false
		case len(s.data) > 0:
			q, have = s.data[0], true
			s.data[0] = queued{}
			if s.data = s.data[1:]; len(s.data) == 0 {
				s.data = nil
			}
			s.dataBytes -= len(q.b)
			if s.wantMore && s.dataBytes < s.ws.cfg.QueueBytes/2 {
				s.wantMore = false
				refetch = s.markFetchLocked()
			}
		}
		s.mu.Unlock()
		if refetch {
			s.ws.push.add(s)
		}
		if !have {
			return true
		}
		s.mu.Lock()
		s.writeStart = time.Now()
		s.mu.Unlock()
		err := s.write(q)
		s.mu.Lock()
		s.writeStart = time.Time{}
		s.mu.Unlock()
		if err != nil {
			s.abort(err)
			return false
		}
	}
}

func (s *wsSession) write(q queued) error {
	_ = s.conn.SetWriteDeadline(time.Now().Add(s.ws.cfg.WriteTimeout))
	if err := s.conn.WriteMessage(websocket.TextMessage, q.b); err != nil {
		return err
	}
	m := s.ws.m
	m.frames.WithLabelValues(q.kind).Inc()
	if q.entries > 0 {
		m.entries.Add(float64(q.entries))
		if !q.signalAt.IsZero() {
			m.pushLatency.Observe(time.Since(q.signalAt).Seconds())
		}
	}
	return nil
}

// writeClose sends the close frame, waits up to CloseGrace for the
// client's (the reader ends on it) and drops the connection.
func (s *wsSession) writeClose(code int, reason string) {
	deadline := time.Now().Add(min(s.ws.cfg.WriteTimeout, time.Second))
	if err := s.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), deadline); err == nil {
		s.ws.m.closed(code)
	} else {
		s.log.Debug("WebSocket close frame not written", "code", code, "err", err)
	}
	t := time.NewTimer(s.ws.cfg.CloseGrace)
	select {
	case <-s.ctx.Done():
	case <-t.C:
	}
	t.Stop()
	_ = s.conn.Close()
}

// abort drops a connection whose write failed. A timed-out write means the
// client stopped reading: the socket is unusable, no close frame can follow.
func (s *wsSession) abort(err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && s.ctx.Err() == nil {
		s.ws.m.slowCloses.WithLabelValues("write_timeout").Inc()
		s.log.Info("WebSocket write timed out, dropping the connection", "err", err)
	} else {
		s.log.Debug("WebSocket write failed", "err", err)
	}
	_ = s.conn.Close()
}
