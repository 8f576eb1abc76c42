package ws

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

// queued is one encoded frame waiting for the writer.
type queued struct {
	b        []byte
	kind     string    // frame type, for the metrics
	entries  int       // entries in an entries frame
	signalAt time.Time // hub wake-up that led to it, for the push latency
}

// session is one connection after its admission.
//
// Goroutines: the reader (read, for the life of the connection), the hub
// loop (hubLoop, for the life of the connection: it only waits for the
// hub's wake-ups of the user) and at most one writer (writer), started
// when a frame is queued and no writer runs, ending when the queues are
// empty. The heartbeat and the hello deadline are timers whose callbacks
// queue work and start the writer. An idle connection so has two parked
// goroutines with small stacks and no writer; see docs/websocket.md.
// Everything below mu is shared with the pusher, the sends and the timers.
type session struct {
	ctx      context.Context    // the session's: the hello's read and the sends run on it
	cancel   context.CancelFunc // ends ctx, when the reader has ended (finish)
	ws       *Server
	conn     *websocket.Conn
	nc       *stallConn // under conn
	id       uint64
	user     int64
	who      Identity // the token's, for CloseRevoked; set before the session is shared
	sub      *hub.Subscription
	leave    func()         // leaves Deps.Ephemeral; nil without it
	readDone chan struct{}  // closed when the reader has ended
	bg       sync.WaitGroup // the hub loop and the writer
	sends    sync.WaitGroup

	// blocked is the user's blocks as the last push read them
	// (Deps.Blocks), which the read-mode frames are masked by.
	blocked atomic.Pointer[inbox.Blocked]

	mu           sync.Mutex
	sendSlot     sync.Cond    // on mu: a send finished or the writer is done
	inflight     int          // sends running
	heartbeat    *time.Timer  // the next heartbeat (beat)
	helloTimer   *time.Timer  // the hello deadline, nil once the hello came
	state        sessionState // where the session is in its life (state.go)
	closeCode    int          // of the close decided, 0 until one is
	closeReason  string
	large        bool // the hello asked for the read-mode pushes (large.go); set before they start
	epoch        int64
	cursor       int64         // last inbox_seq queued
	head         int64         // highest head known (reads and notifications)
	out          sessionWriter // the queued frames and the writer's state
	fetch        fetchState
	dirty        bool      // signalled while a read was in flight
	hbDue        bool      // a heartbeat is owed once caught up
	wantMore     bool      // a read was held back by a full queue
	laggingSince time.Time // zero unless lagging
	signalAt     time.Time // first hub wake-up not yet answered by entries
}

// newSession makes the session of an admitted connection; its context is
// derived from base, the server's.
func newSession(ws *Server, base context.Context, conn *websocket.Conn, nc *stallConn, user int64) *session {
	nc.arm()
	ctx, cancel := context.WithCancel(base)
	s := &session{
		ctx: ctx, cancel: cancel,
		ws: ws, conn: conn, nc: nc, id: ws.nextID.Add(1), user: user,
		sub:      ws.deps.Hub.SubscribeUserRuns(user),
		readDone: make(chan struct{}),
	}
	s.sendSlot.L = &s.mu
	if e := ws.deps.Ephemeral; e != nil {
		s.leave = e.Join(user, s.ephemeralFrame)
	}
	return s
}

// start arms the timers and starts the hub loop; the caller then runs
// read on a goroutine of its own.
func (s *session) start() {
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
func (s *session) finish() {
	s.mu.Lock()
	s.advanceLocked(stateClosed)
	hb, hello := s.heartbeat, s.helloTimer
	s.helloTimer = nil
	s.mu.Unlock()
	close(s.readDone) // a writer waiting for the client's close goes on
	hb.Stop()
	if hello != nil {
		hello.Stop()
	}
	s.cancel()         // the sends in flight end
	_ = s.conn.Close() // unblocks a write to a client that went away
	s.sub.Signal()     // the hub loop sees closed and ends
	s.bg.Wait()
	s.sends.Wait()
	s.sub.Close()
	if s.leave != nil {
		s.leave()
	}
	s.mu.Lock()
	s.clearLaggingLocked()
	s.out.dropAll()
	s.mu.Unlock()
	s.logAt(slog.LevelDebug, "WebSocket session closed")
	s.ws.unregister(s)
	s.ws.conns.Done()
}

// logAt logs with the session's ids.
func (s *session) logAt(level slog.Level, msg string, args ...any) {
	if l := s.ws.log; l.Enabled(s.ctx, level) {
		l.Log(s.ctx, level, msg, append([]any{"conn_id", s.id, "user_id", s.user}, args...)...)
	}
}

// --- timers ---

// beat is the heartbeat: a ping and a re-read of the head (the heartbeat
// frame follows the read).
func (s *session) beat() {
	s.mu.Lock()
	if s.endingLocked() {
		s.mu.Unlock()
		return
	}
	s.heartbeat.Reset(s.ws.heartbeatDelay())
	s.out.pingDue = true
	enq := false
	if s.state == stateStarted {
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
func (s *session) helloExpired() {
	s.mu.Lock()
	seen := s.state != stateAwaitHello
	s.helloTimer = nil
	s.mu.Unlock()
	if !seen {
		s.closeWith(protocol.CloseProtocol, "hello expected", errorFrame(apierr.BadRequest("no hello within %v", s.ws.cfg.HelloTimeout), ""))
	}
}

// --- hub ---

// hubLoop takes the hub's wake-ups of the user until the session ends.
// It is parked in one channel receive nearly all the time and never
// writes, so its stack stays at the smallest size.
func (s *session) hubLoop() {
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
func (s *session) hubWake() bool {
	s.mu.Lock()
	if s.state == stateClosed {
		s.mu.Unlock()
		return false
	}
	if h := s.sub.Head(); h > s.head {
		s.head = h
	}
	// A notification of a head this session has already delivered (or is
	// reading: the read's end compares with s.head) needs no read; a
	// wake-up without a head (the LISTEN connection came back) does.
	if !s.sub.TakeResync() && (s.head <= s.cursor || s.fetch == fetchInflight) {
		if s.state == stateStarted && s.head > s.cursor && s.signalAt.IsZero() {
			s.signalAt = time.Now()
		}
		s.mu.Unlock()
		return true
	}
	if s.state == stateStarted && s.head > s.cursor && s.signalAt.IsZero() {
		s.signalAt = time.Now()
	}
	enq := s.markFetchLocked()
	pending := s.fetch == fetchPending
	s.mu.Unlock()
	if enq {
		s.ws.push.add(s)
	} else if pending && s.sub.HasRun() {
		// Already waiting in the pusher (its hello's read, say) and now
		// announced entries: the window is for reads, not for these.
		s.ws.push.hurry()
	}
	return true
}

// --- queues (shared) ---

// pushDataLocked queues a frame of the ordered stream (welcome, entries,
// too_long, heartbeat).
func (s *session) pushDataLocked(q queued) {
	s.out.pushData(q)
}

// pushControl queues a reply (pong, send_ack, error); replies go before the
// stream. A client that does not read its replies is closed with 4008.
func (s *session) pushControl(b []byte, kind string) {
	s.mu.Lock()
	if s.endingLocked() {
		s.mu.Unlock()
		return
	}
	if len(s.out.control) >= s.ws.cfg.ControlQueue {
		s.mu.Unlock()
		s.ws.m.slowCloses.WithLabelValues("control").Inc()
		s.closeWith(protocol.CloseTooSlow, "replies not read", nil)
		return
	}
	s.out.control = append(s.out.control, queued{b: b, kind: kind})
	start := s.startWriterLocked()
	s.mu.Unlock()
	if start {
		go s.writer()
	}
}

// closeWith makes the writer send frame (if any) and close with code; the
// queued stream is dropped (the client resumes from its cursor).
func (s *session) closeWith(code int, reason string, frame []byte) {
	s.mu.Lock()
	if s.endingLocked() {
		s.mu.Unlock()
		return
	}
	s.advanceLocked(stateClosing)
	s.closeCode, s.closeReason = code, reason
	if frame != nil {
		s.out.control = append(s.out.control, queued{b: frame, kind: protocol.FrameError})
	}
	// A write in progress may be blocked by a client that does not read:
	// it stalls at once (see stallConn) instead of holding the close
	// frame back until WriteTimeout.
	kick := s.out.running && !s.out.writeStart.IsZero() && frame == nil
	start := s.startWriterLocked()
	s.mu.Unlock()
	if kick {
		s.nc.kick()
	}
	if start {
		go s.writer()
	}
}

func (s *session) setLaggingLocked() {
	if s.laggingSince.IsZero() {
		s.laggingSince = time.Now()
		s.ws.m.lagging.Inc()
	}
}

func (s *session) clearLaggingLocked() {
	if !s.laggingSince.IsZero() {
		s.laggingSince = time.Time{}
		s.ws.m.lagging.Dec()
	}
}
