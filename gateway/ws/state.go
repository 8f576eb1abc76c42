package ws

// sessionState is where a session is in its life: one field instead of the
// booleans that together were its state. It only moves forward, with mu
// held:
//
//	stateAwaitHello -> stateHello -> stateStarted  (the reader: takeHelloLocked, startLocked)
//	any earlier     -> stateClosing                (closeWith, closeStalled)
//	any earlier     -> stateWriteDone              (the writer: setWriteDoneLocked)
//	any earlier     -> stateClosed                 (finish, once the reader has ended)
//
// A close can be decided before the hello came, and a write can fail
// before any close was decided, so a later state does not say that an
// earlier one was passed through; whether a close was decided is
// closeCode != 0. From stateClosing on, nothing but the close frame is
// written, so what the earlier states would still allow no longer matters:
// a hello arriving then is not read, and the pusher reads no more entries
// for the session.
type sessionState uint8

const (
	stateAwaitHello sessionState = iota // open, no hello yet; the hello deadline runs
	stateHello                          // a hello arrived: its first page is being read
	stateStarted                        // hello answered: the pusher reads, heartbeats carry a head
	stateClosing                        // a close frame (closeCode) is to be written
	stateWriteDone                      // the close frame was written or the connection dropped
	stateClosed                         // the reader has ended: nothing is queued or written any more
)

// advanceLocked moves the session to st unless it is already there or
// further.
func (s *session) advanceLocked(st sessionState) {
	if s.state < st {
		s.state = st
	}
}

// endingLocked reports whether a close is decided or the session is done with:
// nothing is queued any more.
func (s *session) endingLocked() bool { return s.state >= stateClosing }

// takeHelloLocked records that a hello arrived and reports whether it is
// the first to be answered; it stops the hello deadline either way.
func (s *session) takeHelloLocked() (first bool) {
	if t := s.helloTimer; t != nil {
		t.Stop()
		s.helloTimer = nil
	}
	if s.state != stateAwaitHello {
		return false
	}
	s.state = stateHello
	return true
}

// startLocked records that the hello was answered: the pusher may read.
// A close decided during the hello's read stays decided.
func (s *session) startLocked() {
	if s.state == stateHello {
		s.state = stateStarted
	}
}
