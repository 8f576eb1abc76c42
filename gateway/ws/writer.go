package ws

import (
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/gorilla/websocket"

	"github.com/inboxd/inboxd/protocol"
)

// The session's writer: at most one goroutine at a time writes the queued
// frames, replies first, and the close frame; a write that stalls closes
// with 4008 (see stallConn).

// sessionWriter is a session's outgoing side: the frames queued for the client
// and the state of the session's one writer goroutine (session.writer),
// which drains them. It is guarded by the session's mu: the session decides
// what is queued, and when a close replaces the stream.
type sessionWriter struct {
	running    bool      // a writer goroutine runs
	pingDue    bool      // the heartbeat's ping is to be written
	control    []queued  // replies (pong, send_ack, error), written first
	data       []queued  // the ordered stream (welcome, entries, too_long, heartbeat)
	dataBytes  int       // the bytes in data
	writeStart time.Time // start of the write in progress, zero between writes
	// lingering: the writer waits (writerLinger) for more instead of
	// ending; wakeup (made by the first linger, one slot) wakes it.
	lingering bool
	wakeup    chan struct{}
	timer     *time.Timer // the writer's linger timer, used by the writer only
}

// writerLinger is how long a writer with nothing to write waits for more
// before it ends. A goroutine started per frame grew its stack and ended
// again for every frame: with 1,000 sessions of a read-mode conversation
// at ten frames a second, the stack growth and the goroutine exits took
// 15% of the gateway's CPU (bench large, profile of 16:48). A session
// that gets a frame a second or more keeps its writer; an idle one has
// none (the memory of idle connections): the linger is also at most a
// quarter of the heartbeat interval, so heartbeats alone never keep one.
const writerLinger = 1100 * time.Millisecond

func (ws *Server) writerLinger() time.Duration {
	return min(writerLinger, ws.cfg.HeartbeatInterval/4)
}

// empty reports whether nothing is to be written but, perhaps, a close.
func (w *sessionWriter) empty() bool {
	return !w.pingDue && len(w.control) == 0 && len(w.data) == 0
}

// pushData queues a frame of the ordered stream.
func (w *sessionWriter) pushData(q queued) {
	w.data = append(w.data, q)
	w.dataBytes += len(q.b)
}

// popControl takes the first reply.
func (w *sessionWriter) popControl() queued {
	q := w.control[0]
	w.control[0] = queued{}
	if w.control = w.control[1:]; len(w.control) == 0 {
		w.control = nil
	}
	return q
}

// popData takes the first frame of the stream.
func (w *sessionWriter) popData() queued {
	q := w.data[0]
	w.data[0] = queued{}
	if w.data = w.data[1:]; len(w.data) == 0 {
		w.data = nil
	}
	w.dataBytes -= len(q.b)
	return q
}

// dropAll drops every queued frame.
func (w *sessionWriter) dropAll() {
	w.data, w.dataBytes, w.control = nil, 0, nil
}

// wake starts a writer if something is queued and none runs.
func (s *session) wake() {
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
func (s *session) startWriterLocked() bool {
	if s.out.running && s.out.lingering {
		s.out.lingering = false
		select {
		case s.out.wakeup <- struct{}{}:
		default:
		}
		return false
	}
	if s.out.running || s.state >= stateWriteDone {
		return false
	}
	if s.state != stateClosing && s.out.empty() {
		return false
	}
	s.out.running = true
	s.bg.Add(1)
	return true
}

// writer writes the queued frames, replies first, and ends when the queues
// are empty (a later frame starts a new writer) or the connection is done:
// close frame written, write failed, or reader ended. Every write has a
// deadline (WriteTimeout).
func (s *session) writer() {
	defer s.bg.Done()
	for {
		s.checkSlow()
		var q queued
		var ping, refetch bool
		s.mu.Lock()
		switch {
		case s.state == stateClosed:
			s.out.running = false
			s.mu.Unlock()
			return
		case s.out.pingDue:
			s.out.pingDue, ping = false, true
		case len(s.out.control) > 0:
			q = s.out.popControl()
		case s.state == stateClosing:
			code, reason := s.closeCode, s.closeReason
			s.out.data, s.out.dataBytes = nil, 0
			s.setWriteDoneLocked()
			s.mu.Unlock()
			s.writeClose(code, reason)
			s.mu.Lock()
			s.out.running = false
			s.mu.Unlock()
			return
		case len(s.out.data) > 0:
			q = s.out.popData()
			if s.wantMore && s.out.dataBytes < s.ws.cfg.QueueBytes/2 {
				s.wantMore = false
				refetch = s.markFetchLocked()
			}
		default:
			if !s.lingerLocked() {
				s.out.running = false
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			continue
		}
		s.out.writeStart = time.Now()
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
		s.out.writeStart = time.Time{}
		if err != nil {
			s.setWriteDoneLocked()
			s.out.running = false
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

// lingerLocked waits, with mu released, up to ws.writerLinger() for something
// to write (startWriterLocked wakes it) or the reader's end, and reports
// whether the writer goes on; it returns with mu held.
func (s *session) lingerLocked() bool {
	if s.out.wakeup == nil {
		s.out.wakeup = make(chan struct{}, 1)
	}
	s.out.lingering = true
	wake := s.out.wakeup
	s.mu.Unlock()
	t := s.out.timer
	if t == nil {
		t = time.NewTimer(s.ws.writerLinger())
		s.out.timer = t
	} else {
		t.Reset(s.ws.writerLinger())
	}
	woken := false
	select {
	case <-wake:
		woken = true
	case <-t.C:
	case <-s.readDone:
	}
	t.Stop()
	s.mu.Lock()
	s.out.lingering = false
	// Something queued, or the session closing or closed: the loop sees it.
	return woken || !s.out.empty() || s.state == stateClosing || s.state == stateClosed
}

// closeStalled ends a session whose write stalled: the client did not take
// a frame within WriteTimeout (or a close kicked the write). The unsent rest
// of the frame is kept by the stallConn; the close frame, 4008 unless a
// close was already decided, goes after it, and writeClose flushes both.
func (s *session) closeStalled() {
	s.mu.Lock()
	code, reason := s.closeCode, s.closeReason
	if code == 0 { // no close decided yet
		code, reason = protocol.CloseTooSlow, "too slow: frames not read"
		s.ws.m.slowCloses.WithLabelValues("write_timeout").Inc()
		s.logAt(slog.LevelInfo, "WebSocket write timed out, closing with 4008")
	}
	s.advanceLocked(stateClosing)
	s.closeCode, s.closeReason = code, reason
	s.out.dropAll()
	s.setWriteDoneLocked()
	s.mu.Unlock()
	s.writeClose(code, reason)
	s.mu.Lock()
	s.out.running = false
	s.mu.Unlock()
}

// setWriteDoneLocked records that nothing more is written (a close frame
// goes out, or the connection is dropped) and releases a reader waiting
// for a send slot.
func (s *session) setWriteDoneLocked() {
	s.advanceLocked(stateWriteDone)
	s.sendSlot.Broadcast()
}

// checkSlow closes a session that has been lagging for SlowTimeout.
func (s *session) checkSlow() {
	s.mu.Lock()
	since := s.laggingSince
	s.mu.Unlock()
	if !since.IsZero() && time.Since(since) > s.ws.cfg.SlowTimeout {
		s.ws.m.slowCloses.WithLabelValues("lag").Inc()
		s.logAt(slog.LevelInfo, "closing a WebSocket that cannot keep up", "lagging_for", time.Since(since))
		s.closeWith(protocol.CloseTooSlow, "too slow", nil)
	}
}

func (s *session) write(q queued) error {
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
func (s *session) writeClose(code int, reason string) {
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
func (s *session) abort(err error) {
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
