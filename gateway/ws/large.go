package ws

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/protocol"
)

// The pushes of read-mode conversations (docs/large-conversations.md) to
// the sessions whose hello said "large": true. Their messages write no
// inbox row per member, so the entries pusher never sees them: the index
// below knows, per read-mode conversation, the aware sessions connected
// here, reads the conversation's news once per notification and queues
// the same frame to all of them (no query per member).
//
// Its state is filled at each session's welcome (from the statement of
// the hello's read, inbox.Page.Large) and kept by the L/M/S tokens
// (hub.ListenReadFanout): an L token reads the conversation's news, an M
// token for a local user and an S token for a conversation with local
// members re-read those users' lists (one statement, local users only).
// The tokens are handled on the index's own goroutine (run), coalesced,
// never on the LISTEN goroutine.

// largeConv is one read-mode conversation with aware sessions here: what
// was pushed of it, and its sessions with the seq each one's membership
// began at (a session is never shown a message before it).
type largeConv struct {
	lastSeq, changes int64
	subs             map[*session]int64
}

// largeIndex is the Server's index of read-mode conversations. All its
// fields are guarded by mu; it never holds mu while it takes a session's.
type largeIndex struct {
	ws *Server

	mu     sync.Mutex
	convs  map[int64]*largeConv
	users  map[int64]map[*session]struct{} // the aware sessions by user
	byConv map[*session][]int64            // each session's conversations

	// Work taken from the notifications, not yet done.
	moved    map[int64]largePos
	relist   map[int64]bool // users whose lists are to be re-read
	switched map[int64]bool // conversations whose local members' lists are
	reset    bool           // re-read every list, reset every position
	kick     chan struct{}

	// due is when each conversation may be pushed again (LargePushRate);
	// only run's goroutine uses it.
	due map[int64]time.Time

	lanes *laneSet // the frames leave through them (lanes.go)
}

// largePos is a position of a read-mode conversation (an L token's).
type largePos struct{ lastSeq, changes int64 }

func newLargeIndex(ws *Server) *largeIndex {
	return &largeIndex{ws: ws, convs: map[int64]*largeConv{}, users: map[int64]map[*session]struct{}{},
		byConv: map[*session][]int64{}, moved: map[int64]largePos{}, relist: map[int64]bool{},
		switched: map[int64]bool{}, kick: make(chan struct{}, 1), due: map[int64]time.Time{},
		lanes: newLaneSet()}
}

// notified takes a notification's read-mode tokens (the hub's LISTEN
// goroutine: it only records them). Tokens for conversations and users
// without a session here are dropped at once.
func (x *largeIndex) notified(rf hub.ReadFanout) {
	x.mu.Lock()
	work := false
	for _, l := range rf.Large {
		if x.convs[l.Conv] == nil {
			continue
		}
		p := x.moved[l.Conv]
		x.moved[l.Conv] = largePos{max(p.lastSeq, l.LastSeq), max(p.changes, l.Changes)}
		work = true
	}
	for _, m := range rf.Members {
		if len(x.users[m.User]) > 0 {
			x.relist[m.User], work = true, true
		}
	}
	for _, m := range rf.Modes {
		if len(x.users) > 0 {
			x.switched[m.Conv], work = true, true
		}
	}
	if rf.Reset && len(x.users) > 0 {
		x.reset, work = true, true
	}
	x.mu.Unlock()
	if work {
		select {
		case x.kick <- struct{}{}:
		default:
		}
	}
}

// add registers an aware session with its user's list (from its hello's
// read). A conversation new to the index starts at the list's position:
// what the client reads with ?after= covers what came before.
//
// The list was read before the session was registered, and an M token of
// its user that came in between was dropped (no session here then): a
// removal would leave the session subscribed to a conversation it left.
// So the user's list is read again now that the session is registered
// (relists run before pushes), and every later M token re-reads it too.
func (x *largeIndex) add(s *session, list []inbox.LargeMembership) {
	x.mu.Lock()
	set := x.users[s.user]
	if set == nil {
		set = map[*session]struct{}{}
		x.users[s.user] = set
	}
	set[s] = struct{}{}
	x.setListLocked(s, list)
	x.relist[s.user] = true
	x.mu.Unlock()
	select {
	case x.kick <- struct{}{}:
	default:
	}
}

// setListLocked makes list the session's conversations. A conversation
// the session stays in keeps its entry and position: leaving it first
// dropped the entry when the session was its only one, and the new entry
// took the list's position, past a message notified but not yet pushed
// (its frame was never sent; the client had to read it with ?after=).
func (x *largeIndex) setListLocked(s *session, list []inbox.LargeMembership) {
	stays := make(map[int64]bool, len(list))
	for _, m := range list {
		stays[m.ConversationID] = true
	}
	for _, c := range x.byConv[s] {
		if !stays[c] {
			x.leaveLocked(s, c)
		}
	}
	convs := make([]int64, 0, len(list))
	for _, m := range list {
		lc := x.convs[m.ConversationID]
		if lc == nil {
			lc = &largeConv{lastSeq: m.LastSeq, changes: m.ChangeCount, subs: map[*session]int64{}}
			x.convs[m.ConversationID] = lc
		}
		lc.subs[s] = m.JoinedSeq
		convs = append(convs, m.ConversationID)
	}
	x.byConv[s] = convs
}

func (x *largeIndex) leaveLocked(s *session, conv int64) {
	if lc := x.convs[conv]; lc != nil {
		delete(lc.subs, s)
		if len(lc.subs) == 0 {
			delete(x.convs, conv)
			delete(x.moved, conv)
		}
	}
}

// remove forgets a session (it ended).
func (x *largeIndex) remove(s *session) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, c := range x.byConv[s] {
		x.leaveLocked(s, c)
	}
	delete(x.byConv, s)
	if set := x.users[s.user]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(x.users, s.user)
		}
	}
}

// run does the index's work until ctx ends: the lists first (a session
// that just joined a conversation then gets its messages), then the moved
// conversations.
func (x *largeIndex) run(ctx context.Context) {
	lanesDone := make(chan struct{})
	go func() {
		defer close(lanesDone)
		x.lanes.run(ctx)
	}()
	defer func() { <-lanesDone }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-x.kick:
		}
		x.mu.Lock()
		reset, relist, switched, moved := x.reset, x.relist, x.switched, x.moved
		x.reset, x.relist, x.switched, x.moved = false, map[int64]bool{}, map[int64]bool{}, map[int64]largePos{}
		if reset {
			for u := range x.users {
				relist[u] = true
			}
		}
		x.mu.Unlock()
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := x.relists(qctx, relist, switched, reset); err != nil && ctx.Err() == nil {
			x.ws.log.Warn("WebSocket large lists not read", "err", err)
			x.retry(relist, switched, reset, nil)
		}
		if failed := x.push(qctx, moved); len(failed) > 0 && ctx.Err() == nil {
			x.retry(nil, nil, false, failed)
		}
		cancel()
	}
}

// retry puts work that failed back, to be done after pushRetryDelay.
func (x *largeIndex) retry(relist, switched map[int64]bool, reset bool, moved map[int64]largePos) {
	x.mu.Lock()
	maps.Copy(x.relist, relist)
	maps.Copy(x.switched, switched)
	x.reset = x.reset || reset
	x.mu.Unlock()
	x.requeue(moved, pushRetryDelay)
}

// requeue puts moved conversations back, to be pushed after delay (or
// with the next work, if sooner).
func (x *largeIndex) requeue(moved map[int64]largePos, delay time.Duration) {
	x.mu.Lock()
	for c, p := range moved {
		q := x.moved[c]
		x.moved[c] = largePos{max(p.lastSeq, q.lastSeq), max(p.changes, q.changes)}
	}
	x.mu.Unlock()
	time.AfterFunc(delay, func() {
		select {
		case x.kick <- struct{}{}:
		default:
		}
	})
}

// relists re-reads the lists of the users named and of the local members
// of the conversations that switched, and pushes each its large frame. On
// a reset the positions of the index are taken from the lists (the
// notifications in between are lost; the clients read the gap).
func (x *largeIndex) relists(ctx context.Context, users, switched map[int64]bool, reset bool) error {
	if len(switched) > 0 {
		x.mu.Lock()
		local := slices.Collect(maps.Keys(x.users))
		x.mu.Unlock()
		for c := range switched {
			members, err := x.ws.deps.Inbox.MembersAmong(ctx, c, local)
			if err != nil {
				return err
			}
			for _, u := range members {
				users[u] = true
			}
			// A switch down leaves the members' lists without c.
			x.mu.Lock()
			if lc := x.convs[c]; lc != nil {
				for s := range lc.subs {
					users[s.user] = true
				}
			}
			x.mu.Unlock()
		}
	}
	if len(users) == 0 {
		return nil
	}
	lists, err := x.ws.deps.Inbox.LargeLists(ctx, slices.Collect(maps.Keys(users)))
	if err != nil {
		return err
	}
	var deliver []*session
	var frames [][]byte
	x.mu.Lock()
	for u, list := range lists {
		// Never null: the frame says the whole list, empty or not.
		frame := encodeFrame(protocol.LargeFrame{Type: protocol.FrameLarge, Large: append([]protocol.LargeConv{}, wireList(list)...)})
		for s := range x.users[u] {
			x.setListLocked(s, list)
			deliver, frames = append(deliver, s), append(frames, frame)
		}
		if reset {
			for _, m := range list {
				if lc := x.convs[m.ConversationID]; lc != nil {
					lc.lastSeq, lc.changes = m.LastSeq, m.ChangeCount
				}
			}
		}
	}
	x.mu.Unlock()
	x.lanes.send(ctx, deliver, frames, protocol.FrameLarge, 0)
	return nil
}

// wireList is the large list of a user's memberships (nil when empty:
// the field is then absent).
func wireList(list []inbox.LargeMembership) []protocol.LargeConv {
	if len(list) == 0 {
		return nil
	}
	out := make([]protocol.LargeConv, len(list))
	for i, m := range list {
		out[i] = m.LargeConv
	}
	return out
}

// push reads the news of each moved conversation once and queues the
// frame to its sessions; it returns the conversations whose read failed.
// A conversation pushed less than its pacing interval ago (LargePushRate)
// is put back and pushed when the interval is over, with what came since.
func (x *largeIndex) push(ctx context.Context, moved map[int64]largePos) (failed map[int64]largePos) {
	now := time.Now()
	var later map[int64]largePos
	var wake time.Time
	for c, l := range moved {
		x.mu.Lock()
		lc := x.convs[c]
		if lc == nil || (l.lastSeq <= lc.lastSeq && l.changes <= lc.changes) {
			x.mu.Unlock()
			continue // nobody here, or already pushed
		}
		afterSeq, afterChange, subs := lc.lastSeq, lc.changes, len(lc.subs)
		x.mu.Unlock()
		if d := x.due[c]; now.Before(d) {
			if later == nil {
				later = map[int64]largePos{}
			}
			if later[c] = l; wake.IsZero() || d.Before(wake) {
				wake = d
			}
			continue
		}
		x.due[c] = now.Add(x.interval(subs))
		msgs, changed, err := x.ws.deps.Inbox.LargeNews(ctx, c, afterSeq, l.lastSeq, afterChange, l.changes, x.ws.cfg.PushBatch)
		if err != nil {
			if failed == nil {
				failed = map[int64]largePos{}
			}
			failed[c] = l
			x.ws.log.Warn("WebSocket large push read failed", "conversation_id", c, "err", err)
			continue
		}
		x.deliver(ctx, c, l, msgs, changed)
	}
	if later != nil {
		x.requeue(later, time.Until(wake))
	}
	for c, d := range x.due {
		if now.After(d) {
			delete(x.due, c) // past: the map holds only conversations being paced
		}
	}
	return failed
}

// interval is the pacing of a conversation with subs aware sessions here.
func (x *largeIndex) interval(subs int) time.Duration {
	r := x.ws.cfg.LargePushRate
	if r <= 0 {
		return 0
	}
	return min(time.Duration(float64(subs)/r*float64(time.Second)), maxLargePushInterval)
}

// deliver queues one conversation's news to its sessions, advancing the
// index's position. A session that joined after some of the messages gets
// a frame without them.
func (x *largeIndex) deliver(ctx context.Context, c int64, l largePos, msgs, changed []protocol.Message) {
	x.mu.Lock()
	lc := x.convs[c]
	if lc == nil {
		x.mu.Unlock()
		return
	}
	last, changes := max(lc.lastSeq, l.lastSeq), max(lc.changes, l.changes)
	if n := len(msgs); n > 0 {
		last = max(last, msgs[n-1].Seq)
	}
	for _, m := range changed {
		changes = max(changes, m.ChangedOrd)
	}
	lc.lastSeq, lc.changes = last, changes
	subs := maps.Clone(lc.subs)
	x.mu.Unlock()
	if len(msgs)+len(changed) == 0 {
		return
	}
	frames := map[int64][]byte{} // by the first seq shown
	to, out := make([]*session, 0, len(subs)), make([][]byte, 0, len(subs))
	for s, joined := range subs {
		from := int64(0)
		if len(msgs) > 0 && msgs[0].Seq < joined || len(changed) > 0 && changed[0].Seq < joined {
			from = joined
		}
		if blocked := s.lastBlocked(); sendsAny(blocked, msgs, changed) {
			// A frame of its own, with the blocked senders' messages
			// marked and emptied (docs/protocol.md, "Blocks").
			to, out = append(to, s), append(out, encodeFrame(protocol.MessagesFrame{Type: protocol.FrameMessages, ConversationID: c,
				LastSeq: last, ChangeCount: changes, Messages: inbox.MaskMessages(visibleFrom(msgs, from), blocked),
				Changed: inbox.MaskMessages(visibleFrom(changed, from), blocked)}))
			continue
		}
		b, ok := frames[from]
		if !ok {
			b = encodeFrame(protocol.MessagesFrame{Type: protocol.FrameMessages, ConversationID: c, LastSeq: last,
				ChangeCount: changes, Messages: visibleFrom(msgs, from), Changed: visibleFrom(changed, from)})
			frames[from] = b
		}
		to, out = append(to, s), append(out, b)
	}
	// Spread over the pacing interval (lanes.go): the next push of c
	// comes an interval later, after every lane has delivered this one.
	x.lanes.send(ctx, to, out, protocol.FrameMessages, x.interval(len(subs)))
}

// sendsAny says whether a user of blocked sent one of the messages.
func sendsAny(blocked inbox.Blocked, msgs ...[]protocol.Message) bool {
	if len(blocked) == 0 {
		return false
	}
	for _, ms := range msgs {
		for i := range ms {
			if blocked.Has(ms[i].SenderID) {
				return true
			}
		}
	}
	return false
}

// visibleFrom is msgs without those before seq from (never nil: the
// frame's arrays are never null).
func visibleFrom(msgs []protocol.Message, from int64) []protocol.Message {
	out := make([]protocol.Message, 0, len(msgs))
	for _, m := range msgs {
		if m.Seq >= from {
			out = append(out, m)
		}
	}
	return out
}

// pushLarge queues a frame of the read-mode pushes after what is queued. A
// session whose queue cannot take it (QueueBytes; one frame alone always
// fits an empty queue) is closed with 4008 (too slow), as one that does
// not read its frames: these frames are not re-read later as entries are,
// so dropping one would lose it; the client reconnects, and the welcome's
// list tells it where to read from. A write that stalls is the writer's
// 4008, as for every frame.
func (s *session) pushLarge(b []byte, kind string) {
	s.mu.Lock()
	if s.state != stateStarted {
		s.mu.Unlock()
		return
	}
	if s.out.dataBytes > 0 && s.out.dataBytes+len(b) > s.ws.cfg.QueueBytes {
		s.mu.Unlock()
		s.ws.m.slowCloses.WithLabelValues("large").Inc()
		s.closeWith(protocol.CloseTooSlow, "too slow: frames not read", nil)
		return
	}
	s.pushDataLocked(queued{b: b, kind: kind})
	start := s.startWriterLocked()
	s.mu.Unlock()
	if start {
		go s.writer()
	}
}

// LargeSessions counts the aware sessions the index has for read-mode
// conversation conv, and whether it has the conversation at all (for
// tests and inspection).
func (ws *Server) LargeSessions(conv int64) (sessions int, indexed bool) {
	x := ws.big
	x.mu.Lock()
	defer x.mu.Unlock()
	lc := x.convs[conv]
	if lc == nil {
		return 0, false
	}
	return len(lc.subs), true
}
