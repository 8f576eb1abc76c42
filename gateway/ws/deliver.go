package ws

// Frames outside the inbox stream (receipts of other members): pushed to
// the sessions of this server whose users should see them, as control
// frames (they do not move a cursor and carry nothing a later sync would
// need).

// LocalUsers returns the users with at least one session on this server.
func (ws *Server) LocalUsers() []int64 {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	users := make([]int64, 0, len(ws.perUser))
	for u := range ws.perUser {
		users = append(users, u)
	}
	return users
}

// Deliver queues frame (its type is kind) on every answered session of the
// users for which to returns true. A session that is not yet welcomed
// misses it: its welcome comes after what it would describe.
func (ws *Server) Deliver(to func(user int64) bool, frame []byte, kind string) int {
	ws.mu.Lock()
	targets := make([]*session, 0, 8)
	for s := range ws.sessions {
		if to(s.user) {
			targets = append(targets, s)
		}
	}
	ws.mu.Unlock()
	n := 0
	for _, s := range targets {
		s.mu.Lock()
		started := s.state == stateStarted
		s.mu.Unlock()
		if started {
			s.pushControl(frame, kind)
			n++
		}
	}
	return n
}
