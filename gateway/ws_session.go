package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/inboxd/inboxd/protocol"
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

// wsSession is one connection after its admission.
//
// Goroutines: the reader (read, for the life of the connection), the hub
// loop (hubLoop, for the life of the connection: it only waits for the
// hub's wake-ups of the user) and at most one writer (writer), started
// when a frame is queued and no writer runs, ending when the queues are
// empty. The heartbeat and the hello deadline are timers whose callbacks
// queue work and start the writer. An idle connection so has two parked
// goroutines with small stacks and no writer; see docs/websocket.md.
// Everything below mu is shared with the pusher, the sends and the timers.
type wsSession struct {
	ws       *WebSocket
	conn     *websocket.Conn
	nc       *stallConn // under conn
	id       uint64
	user     int64
	sub      *subscription
	readDone chan struct{}  // closed when the reader has ended
	bg       sync.WaitGroup // the hub loop and the writer
	sends    sync.WaitGroup

	mu           sync.Mutex
	sendSlot     sync.Cond          // on mu: a send finished or the writer is done
	inflight     int                // sends running
	sendCtx      context.Context    // the sends' context, made by the first send
	sendCancel   context.CancelFunc // ends it when the reader ends
	heartbeat    *time.Timer        // the next heartbeat (beat)
	helloTimer   *time.Timer        // the hello deadline, nil once the hello came
	helloSeen    bool               // a hello arrived (set by the reader)
	started      bool               // hello answered: the pusher may read
	closing      bool               // a close frame is to be written
	closed       bool               // the reader has ended: nothing is queued or written any more
	writing      bool               // a writer goroutine runs
	writeDone    bool               // the close frame was written or the connection dropped
	pingDue      bool               // the heartbeat's ping is to be written
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

func newSession(ws *WebSocket, conn *websocket.Conn, nc *stallConn, user int64) *wsSession {
	nc.arm()
	s := &wsSession{
		ws: ws, conn: conn, nc: nc, id: ws.nextID.Add(1), user: user,
		sub:      ws.g.hub.subscribeUserRuns(user),
		readDone: make(chan struct{}),
	}
	s.sendSlot.L = &s.mu
	return s
}

// start arms the timers and starts the hub loop; the caller then runs
// read on a goroutine of its own.
func (s *wsSession) start() {
	s.logAt(slog.LevelDebug, "WebSocket session open")
	s.mu.Lock()
	s.heartbeat = time.AfterFunc(s.ws.heartbeatDelay(), s.beat)
	s.helloTimer = time.AfterFunc(s.ws.cfg.HelloTimeout, s.helloExpired)
	s.mu.Unlock()
	s.bg.Add(1)
	go s.hubLoop()
}

// finish ends the session once the reader has ended: it stops the timers,
// the hub loop, the writer and the sends and releases what they hold.
func (s *wsSession) finish() {
	s.mu.Lock()
	s.closed = true
	hb, hello, cancel := s.heartbeat, s.helloTimer, s.sendCancel
	s.helloTimer = nil
	s.mu.Unlock()
	close(s.readDone) // a writer waiting for the client's close goes on
	hb.Stop()
	if hello != nil {
		hello.Stop()
	}
	if cancel != nil {
		cancel()
	}
	_ = s.conn.Close() // unblocks a write to a client that went away
	s.sub.signal()     // the hub loop sees closed and ends
	s.bg.Wait()
	s.sends.Wait()
	s.sub.Close()
	s.mu.Lock()
	s.clearLaggingLocked()
	s.data, s.control, s.dataBytes = nil, nil, 0
	s.mu.Unlock()
	s.logAt(slog.LevelDebug, "WebSocket session closed")
	s.ws.unregister(s)
	s.ws.conns.Done()
}

// logAt logs with the session's ids.
func (s *wsSession) logAt(level slog.Level, msg string, args ...any) {
	ctx := context.Background()
	if l := s.ws.log; l.Enabled(ctx, level) {
		l.Log(ctx, level, msg, append([]any{"conn_id", s.id, "user_id", s.user}, args...)...)
	}
}

// wake starts a writer if something is queued and none runs.
func (s *wsSession) wake() {
	s.mu.Lock()
	start := s.startWriterLocked()
	s.mu.Unlock()
	if start {
		go s.writer()
	}
}

// startWriterLocked reports whether the caller must start a writer (go
// s.writer()): something is to be written and no writer runs. At most one
// writer runs at a time, so gorilla's rule of one concurrent writer holds.
func (s *wsSession) startWriterLocked() bool {
	if s.writing || s.writeDone || s.closed {
		return false
	}
	if !s.pingDue && !s.closing && len(s.control) == 0 && len(s.data) == 0 {
		return false
	}
	s.writing = true
	s.bg.Add(1)
	return true
}

// --- timers ---

// beat is the heartbeat: a ping and a re-read of the head (the heartbeat
// frame follows the read).
func (s *wsSession) beat() {
	s.mu.Lock()
	if s.closed || s.closing || s.writeDone {
		s.mu.Unlock()
		return
	}
	s.heartbeat.Reset(s.ws.heartbeatDelay())
	s.pingDue = true
	enq := false
	if s.started {
		s.hbDue = true
		enq = s.markFetchLocked()
	}
	start := s.startWriterLocked()
	s.mu.Unlock()
	if start {
		go s.writer()
	}
	if enq {
		s.ws.push.add(s)
	}
}

// helloExpired closes a connection whose hello did not come in time.
func (s *wsSession) helloExpired() {
	s.mu.Lock()
	seen := s.helloSeen
	s.helloTimer = nil
	s.mu.Unlock()
	if !seen {
		s.closeWith(protocol.CloseProtocol, "hello expected", errorFrame(badRequest("no hello within %v", s.ws.cfg.HelloTimeout), ""))
	}
}

// --- hub ---

// hubLoop takes the hub's wake-ups of the user until the session ends.
// It is parked in one channel receive nearly all the time and never
// writes, so its stack stays at the smallest size.
func (s *wsSession) hubLoop() {
	defer s.bg.Done()
	for range s.sub.C() {
		if !s.hubWake() {
			return
		}
	}
}

// hubWake handles a wake-up of the user's hub subscription; it reports
// false once the session has ended. It is kept out of hubLoop (noinline)
// so that hubLoop's frame, which an idle connection holds, stays small.
//
//go:noinline
func (s *wsSession) hubWake() bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	if h := s.sub.Head(); h > s.head {
		s.head = h
	}
	// A notification of a head this session has already delivered (or is
	// reading: the read's end compares with s.head) needs no read; a
	// wake-up without a head (the LISTEN connection came back) does.
	if !s.sub.takeResync() && (s.head <= s.cursor || s.fetch == fetchInflight) {
		if s.started && s.head > s.cursor && s.signalAt.IsZero() {
			s.signalAt = time.Now()
		}
		s.mu.Unlock()
		return true
	}
	if s.started && s.head > s.cursor && s.signalAt.IsZero() {
		s.signalAt = time.Now()
	}
	enq := s.markFetchLocked()
	s.mu.Unlock()
	if enq {
		s.ws.push.add(s)
	}
	return true
}

// --- reader ---

// read is the reader goroutine. The connection is idle in NextReader; the
// frames of read and of what an idle read calls are what the connection's
// stack holds, so the work is done in other functions (readFrame,
// readSetup, readEnded), not inlined here: used below a quarter of 8 KiB,
// the stack that a hello grew is halved back to 4 KiB by the next GCs.
func (s *wsSession) read() {
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
func (s *wsSession) readSetup() {
	c, cfg := s.conn, &s.ws.cfg
	c.SetReadLimit(cfg.MaxFrameBytes)
	_ = c.SetReadDeadline(time.Now().Add(cfg.ReadTimeout))
	c.SetPongHandler(func(string) error { return c.SetReadDeadline(time.Now().Add(cfg.ReadTimeout)) })
}

// readFrame reads and handles one client frame; false ends the reader.
//
//go:noinline
func (s *wsSession) readFrame(mt int, r io.Reader) bool {
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
func (s *wsSession) readEnded(err error) {
	if !websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway) {
		s.logAt(slog.LevelDebug, "WebSocket read ended", "err", err)
	}
}

// handle acts on one client frame. Bad frames get an error frame and the
// connection stays open; only a bad hello closes it.
func (s *wsSession) handle(mt int, data []byte) {
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
				msgID, _ = parseMsgID(in.MsgID)
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
	case protocol.FramePing:
		s.pushControl(encodeFrame(protocol.Pong{Type: protocol.FramePong}), protocol.FramePong)
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
		return nil, badRequest("frames must be JSON text messages")
	}
	if !utf8.Valid(data) {
		return nil, badRequest("frame is not valid UTF-8")
	}
	var in protocol.ClientFrame
	if err := json.Unmarshal(data, &in); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &in, badRequest("%s", describeJSONError(err))
		}
		return nil, badRequest("%s", describeJSONError(err))
	}
	if err := checkJSONText(data); err != nil {
		return &in, err
	}
	switch in.Type {
	case protocol.FrameHello, protocol.FrameSend, protocol.FramePing:
		return &in, nil
	}
	return nil, badRequest("unknown frame type %q (hello, send, ping)", in.Type)
}

// refuseHello answers a hello that GET /v1/sync would answer with 400 (a
// cursor or epoch that is negative, of the wrong type or beyond the head):
// the error frame HTTP's body would be, and close 1008 at once. A second
// hello, bad or not, only gets an error frame.
func (s *wsSession) refuseHello(err error) {
	s.mu.Lock()
	seen := s.helloSeen
	s.helloSeen = true
	if t := s.helloTimer; t != nil {
		t.Stop()
		s.helloTimer = nil
	}
	s.mu.Unlock()
	if seen {
		s.pushControl(errorFrame(badRequest("hello was already received on this connection"), ""), protocol.FrameError)
		return
	}
	s.closeWith(protocol.CloseProtocol, "bad hello", errorFrame(err, ""))
}

// hello answers the client's cursor: welcome, then too_long or the first
// catch-up page, read with the rules of GET /v1/sync (readSync). The rest
// of the catch-up and the live entries come from the pusher. The hub
// subscription predates this read, so a commit after it is not missed.
func (s *wsSession) hello(in *protocol.ClientFrame) {
	s.mu.Lock()
	seen := s.helloSeen
	s.helloSeen = true
	if t := s.helloTimer; t != nil {
		t.Stop()
		s.helloTimer = nil
	}
	s.mu.Unlock()
	if seen {
		s.pushControl(errorFrame(badRequest("hello was already received on this connection"), ""), protocol.FrameError)
		return
	}
	g, cfg := s.ws.g, &s.ws.cfg
	p := syncParams{limit: cfg.PushBatch}
	if in.After != nil {
		p.after = *in.After
	}
	// The bounds and messages of GET /v1/sync's parameters (queryInt).
	if p.after < 0 {
		s.closeWith(protocol.CloseProtocol, "bad hello", errorFrame(badRequest("parameter after must be an integer in 0..%d", int64(math.MaxInt64)), ""))
		return
	}
	if in.Epoch != nil {
		p.epoch, p.hasEpoch = *in.Epoch, true
		if p.epoch < 0 {
			s.closeWith(protocol.CloseProtocol, "bad hello", errorFrame(badRequest("parameter epoch must be an integer in 0..%d", int64(math.MaxInt64)), ""))
			return
		}
	}
	// The hello runs on the reader, so the session cannot end under it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := g.readSync(ctx, s.user, p)
	var e *Error
	if errors.As(err, &e) && e.Code == protocol.CodeBadRequest {
		// A cursor beyond the head cannot be filled: HTTP answers 400,
		// and so does the hello, closing at once. The client's cursor
		// is corrupt; it must start again from 0 (or send its epoch, so
		// that a replay gives a clean too_long instead).
		s.closeWith(protocol.CloseProtocol, "bad hello", errorFrame(err, ""))
		return
	}
	var tl *protocol.TooLong
	if err == nil && res.tooLong {
		tl, err = g.tooLongAnswer(ctx, s.user, res, g.cfg.PageDefault)
	}
	if err != nil {
		s.logAt(slog.LevelWarn, "WebSocket hello failed", "err", err)
		s.closeWith(protocol.CloseInternal, "hello failed, reconnect", errorFrame(err, ""))
		return
	}

	s.mu.Lock()
	s.started = true
	s.epoch = res.epoch
	s.head = max(s.head, res.head, s.sub.Head())
	s.pushDataLocked(queued{kind: protocol.FrameWelcome, b: encodeFrame(protocol.Welcome{Type: protocol.FrameWelcome, Epoch: res.epoch, Head: res.head,
		HeartbeatMS: cfg.HeartbeatInterval.Milliseconds()})})
	if tl != nil {
		s.pushDataLocked(queued{kind: protocol.FrameTooLong, b: encodeFrame(protocol.TooLongFrame{Type: protocol.FrameTooLong, TooLong: tl})})
		s.cursor, s.head = res.head, res.head
	} else {
		s.cursor = p.after
		if n := len(res.entries); n > 0 {
			s.pushDataLocked(queued{kind: protocol.FrameEntries, entries: n,
				b: entriesFrame(res.entries, res.head)})
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
func (s *wsSession) send(in *protocol.ClientFrame) {
	g := s.ws.g
	fail := func(err error, msgID string) { s.pushControl(errorFrame(err, msgID), protocol.FrameError) }
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
	// A send slot: while MaxInflightSends run, the connection's next
	// frame is not read, unless nothing can be written any more.
	s.mu.Lock()
	for s.inflight >= s.ws.cfg.MaxInflightSends {
		if s.writeDone {
			s.mu.Unlock()
			return
		}
		s.sendSlot.Wait()
	}
	s.inflight++
	if s.sendCtx == nil {
		s.sendCtx, s.sendCancel = context.WithCancel(context.Background())
	}
	ctx := s.sendCtx
	s.mu.Unlock()
	cid, body := in.ConversationID, *in.Body
	s.sends.Add(1)
	go func() {
		defer s.sends.Done()
		defer func() {
			s.mu.Lock()
			s.inflight--
			s.sendSlot.Signal()
			s.mu.Unlock()
		}()
		res, err := g.send(ctx, s.user, cid, msgID, body)
		switch {
		case err != nil:
			if errors.Is(err, errClientGone) || ctx.Err() != nil {
				return
			}
			if e := toError(err); e.Code == protocol.CodeInternal || e.Err != nil {
				s.logAt(slog.LevelWarn, "WebSocket send failed", "conversation_id", cid, "msg_id", msgID, "err", err)
			}
			fail(err, msgID)
		case res.status == sendPending:
			fail(unavailable("the message is appended but not projected yet; send it again with the same msg_id for its seq",
				time.Second, nil), msgID)
		default:
			s.pushControl(encodeFrame(protocol.SendAck{Type: protocol.FrameSendAck, MsgID: msgID, ConversationID: cid,
				Seq: res.message.Seq}), protocol.FrameSendAck)
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
		s.closeWith(protocol.CloseTooSlow, "replies not read", nil)
		return
	}
	s.control = append(s.control, queued{b: b, kind: kind})
	start := s.startWriterLocked()
	s.mu.Unlock()
	if start {
		go s.writer()
	}
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
		s.control = append(s.control, queued{b: frame, kind: protocol.FrameError})
	}
	// A write in progress may be blocked by a client that does not read:
	// it stalls at once (see stallConn) instead of holding the close
	// frame back until WriteTimeout.
	kick := s.writing && !s.writeStart.IsZero() && frame == nil
	start := s.startWriterLocked()
	s.mu.Unlock()
	if kick {
		s.nc.kick()
	}
	if start {
		go s.writer()
	}
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

// writer writes the queued frames, replies first, and ends when the queues
// are empty (a later frame starts a new writer) or the connection is done:
// close frame written, write failed, or reader ended. Every write has a
// deadline (WriteTimeout).
func (s *wsSession) writer() {
	defer s.bg.Done()
	for {
		s.checkSlow()
		var q queued
		var ping, refetch bool
		s.mu.Lock()
		switch {
		case s.closed:
			s.writing = false
			s.mu.Unlock()
			return
		case s.pingDue:
			s.pingDue, ping = false, true
		case len(s.control) > 0:
			q = s.control[0]
			s.control[0] = queued{}
			if s.control = s.control[1:]; len(s.control) == 0 {
				s.control = nil
			}
		case s.closing:
			code, reason := s.closeCode, s.closeReason
			s.data, s.dataBytes = nil, 0
			s.setWriteDoneLocked()
			s.mu.Unlock()
			s.writeClose(code, reason)
			s.mu.Lock()
			s.writing = false
			s.mu.Unlock()
			return
		case len(s.data) > 0:
			q = s.data[0]
			s.data[0] = queued{}
			if s.data = s.data[1:]; len(s.data) == 0 {
				s.data = nil
			}
			s.dataBytes -= len(q.b)
			if s.wantMore && s.dataBytes < s.ws.cfg.QueueBytes/2 {
				s.wantMore = false
				refetch = s.markFetchLocked()
			}
		default:
			s.writing = false
			s.mu.Unlock()
			return
		}
		s.writeStart = time.Now()
		s.mu.Unlock()
		if refetch {
			s.ws.push.add(s)
		}
		var err error
		if ping {
			err = s.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(s.ws.cfg.WriteTimeout))
		} else {
			err = s.write(q)
		}
		s.mu.Lock()
		s.writeStart = time.Time{}
		if err != nil {
			s.setWriteDoneLocked()
			s.writing = false
		}
		s.mu.Unlock()
		if err != nil {
			s.abort(err)
			return
		}
		if s.nc.isStalled() {
			s.closeStalled()
			return
		}
	}
}

// closeStalled ends a session whose write stalled: the client did not take
// a frame within WriteTimeout (or a close kicked the write). The unsent rest
// of the frame is kept by the stallConn; the close frame, 4008 unless a
// close was already decided, goes after it, and writeClose flushes both.
func (s *wsSession) closeStalled() {
	s.mu.Lock()
	code, reason := s.closeCode, s.closeReason
	if !s.closing {
		code, reason = protocol.CloseTooSlow, "too slow: frames not read"
		s.ws.m.slowCloses.WithLabelValues("write_timeout").Inc()
		s.logAt(slog.LevelInfo, "WebSocket write timed out, closing with 4008")
	}
	s.closing, s.closeCode, s.closeReason = true, code, reason
	s.data, s.dataBytes, s.control = nil, 0, nil
	s.setWriteDoneLocked()
	s.mu.Unlock()
	s.writeClose(code, reason)
	s.mu.Lock()
	s.writing = false
	s.mu.Unlock()
}

// setWriteDoneLocked records that nothing more is written (a close frame
// goes out, or the connection is dropped) and releases a reader waiting
// for a send slot.
func (s *wsSession) setWriteDoneLocked() {
	s.writeDone = true
	s.sendSlot.Broadcast()
}

// checkSlow closes a session that has been lagging for SlowTimeout.
func (s *wsSession) checkSlow() {
	s.mu.Lock()
	since := s.laggingSince
	s.mu.Unlock()
	if !since.IsZero() && time.Since(since) > s.ws.cfg.SlowTimeout {
		s.ws.m.slowCloses.WithLabelValues("lag").Inc()
		s.logAt(slog.LevelInfo, "closing a WebSocket that cannot keep up", "lagging_for", time.Since(since))
		s.closeWith(protocol.CloseTooSlow, "too slow", nil)
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
// client's (the reader ends on it) and drops the connection. Behind a
// stalled write, the close frame is kept after the rest of the stalled
// frame, and both get WriteTimeout of their own to reach the client.
func (s *wsSession) writeClose(code int, reason string) {
	deadline := time.Now().Add(min(s.ws.cfg.WriteTimeout, time.Second))
	err := s.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), deadline)
	if err == nil {
		err = s.nc.flush(time.Now().Add(s.ws.cfg.WriteTimeout))
	}
	if err == nil {
		s.ws.m.closed(code)
	} else {
		s.logAt(slog.LevelDebug, "WebSocket close frame not written", "code", code, "err", err)
	}
	t := time.NewTimer(s.ws.cfg.CloseGrace)
	select {
	case <-s.readDone:
	case <-t.C:
	}
	t.Stop()
	_ = s.conn.Close()
}

// abort drops a connection whose write failed. A write that times out is
// not a failure once the stallConn is armed (it stalls, and closeStalled
// closes with 4008); what is left here is a connection that is gone, or a
// client that went on pinging while not reading after a stall.
func (s *wsSession) abort(err error) {
	var ne net.Error
	readerLive := true
	select {
	case <-s.readDone:
		readerLive = false
	default:
	}
	if errors.As(err, &ne) && ne.Timeout() && readerLive {
		s.ws.m.slowCloses.WithLabelValues("write_timeout").Inc()
		s.logAt(slog.LevelInfo, "WebSocket write timed out, dropping the connection", "err", err)
	} else {
		s.logAt(slog.LevelDebug, "WebSocket write failed", "err", err)
	}
	_ = s.conn.Close()
}
