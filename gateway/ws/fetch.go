package ws

import (
	"time"

	"github.com/inboxd/inboxd/protocol"
)

// The session's side of the pusher: a session asks for a read of its
// entries (markFetchLocked), the pusher begins it (beginFetch) and hands
// the result back (takeFetch); the pusher edits none of its fields.

// fetchState is where a session stands with the pusher: at most one read of
// its entries is pending or in flight at a time, which is what keeps its
// cursor, and so its stream, contiguous.
type fetchState uint8

const (
	fetchIdle     fetchState = iota
	fetchPending             // in the pusher's pending (or retry) list
	fetchInflight            // in a running push query
)

// markFetchLocked asks for a read of the session's entries unless one is
// pending or running (then it is redone after) or the queue is too full
// (then the writer asks again when it has drained). It reports whether the
// caller must hand the session to the pusher.
func (s *session) markFetchLocked() bool {
	if s.state != stateStarted {
		return false
	}
	switch s.fetch {
	case fetchPending:
		return false
	case fetchInflight:
		s.dirty = true
		return false
	}
	if s.out.dataBytes >= s.ws.cfg.QueueBytes/2 {
		s.wantMore = true
		if s.head > s.cursor {
			s.setLaggingLocked()
		}
		return false
	}
	s.fetch = fetchPending
	return true
}

// beginFetch moves a pending read in flight and returns the cursor to read
// after; false when no read is to run (none pending, or the session is
// closing: a pending read is then dropped).
func (s *session) beginFetch() (after int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fetch == fetchPending && !s.endingLocked() {
		s.fetch = fetchInflight
		return s.cursor, true
	}
	if s.fetch == fetchPending {
		s.fetch = fetchIdle
	}
	return 0, false
}

// runBase is the epoch and head of a push built from entries up to last
// that the notifications announced.
func (s *session) runBase(last int64) (epoch, head int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch, max(s.head, last)
}

// mustRebase reports whether the stream cannot go on from r: a replay
// started a new epoch, retention passed the cursor, or r does not follow
// it. The session's state only changes under its own (single) read, so its
// cursor and epoch are still those of the query.
func (s *session) mustRebase(r *pushResult) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return r.Epoch != s.epoch || s.cursor < r.Floor || s.cursor > r.Head ||
		(len(r.Entries) > 0 && r.Entries[0].InboxSeq != s.cursor+1)
}

// fetchNext is what the pusher does for a session after takeFetch.
type fetchNext uint8

const (
	fetchDone  fetchNext = iota // nothing: no read is pending
	fetchRetry                  // the read failed: read again after pushRetryDelay
	fetchAgain                  // read again now (pusher.add)
)

// takeFetch queues what the pusher read for s (entries, or tl, the
// too-long answer of a rebase) and decides what comes next: another read
// right away (more to read, or signalled meanwhile), a read when the
// writer has drained (queue full: the session lags), a retry, or nothing.
func (s *session) takeFetch(r *pushResult, tl *protocol.TooLong) fetchNext {
	s.mu.Lock()
	s.fetch = fetchIdle
	if s.endingLocked() {
		s.mu.Unlock()
		return fetchDone
	}
	if r.err != nil {
		if s.hbDue && s.cursor >= s.head {
			s.hbDue = false
			s.pushDataLocked(queued{kind: protocol.FrameHeartbeat, b: encodeFrame(protocol.Heartbeat{Type: protocol.FrameHeartbeat, Head: s.head, Reconnect: s.ws.reconnectHint()})})
		}
		s.fetch, s.dirty = fetchPending, false
		s.mu.Unlock()
		s.wake()
		return fetchRetry
	}
	switch {
	case tl != nil:
		s.pushDataLocked(queued{kind: protocol.FrameTooLong, b: encodeFrame(protocol.TooLongFrame{Type: protocol.FrameTooLong, TooLong: tl})})
		s.epoch, s.cursor, s.head = r.Epoch, r.Head, r.Head
	case len(r.Entries) > 0:
		n := len(r.Entries)
		s.pushDataLocked(queued{kind: protocol.FrameEntries, entries: n, signalAt: s.signalAt,
			b: entriesFrame(r.Entries, r.Head)})
		s.cursor = r.Entries[n-1].InboxSeq
		s.signalAt = time.Time{}
	}
	// A notification newer than the read's snapshot may have raised s.head
	// while it ran: then it reads again. After a rebase the read is the
	// truth (a new epoch may have lower heads).
	if tl != nil || r.Head > s.head {
		s.head = r.Head
	}
	if s.cursor >= r.Head {
		s.clearLaggingLocked()
		s.signalAt = time.Time{}
		if s.hbDue {
			s.hbDue = false
			s.pushDataLocked(queued{kind: protocol.FrameHeartbeat, b: encodeFrame(protocol.Heartbeat{Type: protocol.FrameHeartbeat, Head: r.Head, Reconnect: s.ws.reconnectHint()})})
		}
	}
	enq := false
	if s.cursor < s.head || s.dirty {
		s.dirty = false
		enq = s.markFetchLocked()
	}
	s.mu.Unlock()
	s.wake()
	if enq {
		return fetchAgain
	}
	return fetchDone
}
