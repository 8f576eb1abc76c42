package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/inboxd/inboxd/protocol"
)

// The inbox side of the client: handing entries to the app in order,
// exactly once, and keeping per-conversation seqs and history holes.
//
// Every delivery (an entry, a too_long jump, a backfilled page) runs under
// deliverMu: the decision (is this new?), the app's handler and the state
// change that records it happen as one step, so an entry and a backfill
// racing for the same message cannot both hand it over.

type inHandlerKey struct{}

// handlerCtx marks ctx as a handler's, so that calls that would deadlock
// (Backfill, Sync) refuse to run inside one.
func handlerCtx(ctx context.Context) context.Context {
	return context.WithValue(ctx, inHandlerKey{}, true)
}

func inHandler(ctx context.Context) bool {
	v, _ := ctx.Value(inHandlerKey{}).(bool)
	return v
}

// position is the saved inbox position.
func (c *Client) position() (epoch, cursor int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.Epoch, c.st.Cursor
}

// syncRequestAt is "entries after the cursor" for the current position.
func (c *Client) syncRequestAt(wait bool) syncRequest {
	epoch, cursor := c.position()
	r := syncRequest{after: cursor, epoch: epoch, hasEpoch: epoch > 0, limit: c.cfg.PageSize}
	if wait {
		r.wait = c.cfg.LongPollWait
	}
	return r
}

// noteEpoch adopts the server's epoch while the client has none yet (a
// fresh client). A changed epoch with a cursor always comes as too_long.
func (c *Client) noteEpoch(epoch int64) {
	c.mu.Lock()
	if c.st.Cursor == 0 || c.st.Epoch == 0 {
		c.st.Epoch = epoch
	}
	c.mu.Unlock()
}

// conv returns the state of conversation id, creating it.
func (c *Client) conv(id int64) *ConversationState {
	cs := c.st.Conversations[id]
	if cs == nil {
		cs = &ConversationState{}
		c.st.Conversations[id] = cs
	}
	return cs
}

// deliverOne hands e to the app if it is the next entry (inbox_seq =
// cursor+1) and records it. Called with deliverMu held.
//
// A message's state in an entry is read when the entry is served, so a
// message entry may already carry changes whose update entries come later;
// the versions the app was handed decide which update is new (OnUpdate).
func (c *Client) deliverOne(ctx context.Context, e Entry) error {
	c.mu.Lock()
	next := e.InboxSeq == c.st.Cursor+1
	c.mu.Unlock()
	if !next {
		return nil
	}
	if e.Kind == KindMessage && e.Message != nil {
		// An entry of a read-mode conversation (a mention, an armed
		// member's) may jump past the last seq delivered: the messages
		// between are read and delivered first (large.go).
		if err := c.gapBeforeLocked(ctx, e.ConversationID, e.Message.Seq); err != nil {
			return err
		}
	}
	c.mu.Lock()
	skip, update := c.judgeLocked(e)
	c.mu.Unlock()

	if !skip && c.cfg.Handler.OnEntry != nil && !c.hidden(e.Message) {
		if err := c.cfg.Handler.OnEntry(handlerCtx(ctx), e); err != nil {
			return fatal("OnEntry(inbox_seq %d): %w", e.InboxSeq, err)
		}
	}
	if update != nil && c.cfg.Handler.OnUpdate != nil && !c.hidden(update) {
		if err := c.cfg.Handler.OnUpdate(handlerCtx(ctx), *update); err != nil {
			return fatal("OnUpdate(inbox_seq %d, conversation %d, seq %d, version %d): %w",
				e.InboxSeq, e.ConversationID, update.Seq, update.CurrentVersion(), err)
		}
	}

	c.mu.Lock()
	c.st.Cursor = e.InboxSeq
	done, waiters := c.recordLocked(e)
	c.uncommitted++
	commit := c.uncommitted >= c.cfg.CommitEvery || done != nil
	c.mu.Unlock()

	var err error
	if commit {
		err = c.save(ctx)
	}
	if done != nil {
		c.sendDone(ctx, *done, waiters)
	}
	return err
}

// judgeLocked says whether the app already has entry e's message (skip:
// not handed to OnEntry again) and whether e carries a newer state of a
// message the app has (update, for OnUpdate). Called with c.mu held.
func (c *Client) judgeLocked(e Entry) (skip bool, update *Message) {
	m := e.Message
	if m == nil || (e.Kind != KindMessage && e.Kind != KindUpdate) {
		return false, nil
	}
	applied := int64(1)
	cs := c.st.Conversations[e.ConversationID]
	if cs != nil {
		applied = cs.appliedVersion(m.Seq)
	}
	if e.Kind == KindMessage && cs != nil {
		// Already handed over (by Backfill): seqs up to LastSeq that are
		// not in a hole were delivered. Its state may be newer.
		skip = m.Seq <= cs.LastSeq && !holeSet(cs.Holes).contains(m.Seq)
	}
	if (e.Kind == KindUpdate || skip) && m.CurrentVersion() > applied {
		update = m
	}
	return skip, update
}

// recordLocked applies delivered entry e to the state: a message's seq,
// holes and version, the send it completes (done, with its waiters), an
// update's version, a record's version. Called with c.mu held.
func (c *Client) recordLocked(e Entry) (done *SendResult, waiters []chan SendResult) {
	switch {
	case e.Kind == KindMessage && e.Message != nil:
		m := e.Message
		cs := c.conv(e.ConversationID)
		switch {
		case m.Seq > cs.LastSeq:
			// A seq skipping ahead of a known last seq: the ones between
			// exist and were not seen (or are not visible; Backfill tells).
			if cs.LastSeq > 0 && m.Seq > cs.LastSeq+1 {
				cs.Holes = holeSet(cs.Holes).add(cs.LastSeq+1, m.Seq-1)
			}
			cs.LastSeq = m.Seq
		default:
			cs.Holes = holeSet(cs.Holes).remove(m.Seq, m.Seq)
		}
		cs.noteVersion(m.Seq, m.CurrentVersion())
		if i := c.outboxIndex(m.MsgID); i >= 0 && c.st.Outbox[i].ConversationID == m.ConversationID {
			// The send's message came through the inbox first.
			done = &SendResult{MsgID: m.MsgID, ConversationID: m.ConversationID, Message: m}
			c.st.Outbox = slices.Delete(c.st.Outbox, i, i+1)
			waiters = c.recordResultLocked(*done)
		}
	case e.Kind == KindUpdate && e.Message != nil:
		c.conv(e.ConversationID).noteVersion(e.Message.Seq, e.Message.CurrentVersion())
	case e.Kind == KindRecord && e.Record != nil:
		cs := c.conv(e.ConversationID)
		cs.Version = max(cs.Version, e.Record.Version)
		c.st.RecordVersion = max(c.st.RecordVersion, e.Record.Version)
	}
	return done, waiters
}

// commit saves the state if entries were delivered since the last save.
func (c *Client) commit(ctx context.Context) error {
	c.mu.Lock()
	n := c.uncommitted
	c.mu.Unlock()
	if n == 0 {
		return nil
	}
	return c.save(ctx)
}

// save writes a snapshot of the state to the Store. Snapshots are taken
// and written under saveMu, so they reach the store in order.
func (c *Client) save(ctx context.Context) error {
	c.saveMu.Lock()
	defer c.saveMu.Unlock()
	c.mu.Lock()
	snap := c.st.Clone()
	c.uncommitted = 0
	c.mu.Unlock()
	// A save at shutdown must still happen.
	if err := c.cfg.Store.Save(context.WithoutCancel(ctx), snap); err != nil {
		return fatal("save client state: %w", err)
	}
	return nil
}

// sequencer puts the entries of one session in order: it buffers entries
// beyond a gap and delivers whatever has become contiguous with the cursor.
// It belongs to one session goroutine.
type sequencer struct {
	c   *Client
	buf map[int64]Entry
}

func newSequencer(c *Client) *sequencer { return &sequencer{c: c, buf: map[int64]Entry{}} }

// offer takes entries (any order, duplicates allowed) and delivers all that
// follow the cursor without a gap. gap reports entries left waiting beyond
// a missing one.
func (s *sequencer) offer(ctx context.Context, entries []Entry) (gap bool, err error) {
	_, cursor := s.c.position()
	for _, e := range entries {
		if e.InboxSeq > cursor {
			s.buf[e.InboxSeq] = e
		}
	}
	return s.drain(ctx)
}

// drain delivers buffered entries while the next one is there.
func (s *sequencer) drain(ctx context.Context) (gap bool, err error) {
	if len(s.buf) == 0 {
		return false, nil
	}
	s.c.deliverMu.Lock()
	defer s.c.deliverMu.Unlock()
	for {
		_, cursor := s.c.position()
		for k := range s.buf {
			if k <= cursor {
				delete(s.buf, k)
			}
		}
		e, ok := s.buf[cursor+1]
		if !ok {
			break
		}
		delete(s.buf, e.InboxSeq)
		if err := s.c.deliverOne(ctx, e); err != nil {
			return len(s.buf) > 0, err
		}
	}
	if err := s.c.commit(ctx); err != nil {
		return len(s.buf) > 0, err
	}
	return len(s.buf) > 0, nil
}

// reset forgets the buffered entries (after a too_long rebased the cursor).
func (s *sequencer) reset() { clear(s.buf) }

// errInconsistent is an HTTP page that does not continue the cursor: the
// server broke its contract; the client retries rather than skip entries.
var errInconsistent = errors.New("client: sync page does not continue the cursor")

// pull fetches entries after the cursor over HTTP until the head, handling
// too_long answers. It is the repair path of the WebSocket (gaps, a head
// beyond the cursor) and the body of Sync.
func (c *Client) pull(ctx context.Context, seq *sequencer) error {
	for {
		ans, _, _, err := c.api.sync(ctx, c.syncRequestAt(false))
		if err != nil {
			return err
		}
		c.noteCounts(ans.Counts)
		if ans.TooLong {
			seq.reset()
			if err := c.applyTooLong(ctx, ans); err != nil {
				return err
			}
			if err := c.largeAnswer(ctx, ans.Large); err != nil {
				return err
			}
			continue
		}
		c.noteEpoch(ans.Epoch)
		c.noteLarge(ans.Large)
		gap, err := seq.offer(ctx, ans.Entries)
		if err != nil {
			return err
		}
		if err := c.catchUpLarge(ctx, ans.Large); err != nil {
			return err
		}
		if gap && len(ans.Entries) > 0 {
			_, cursor := c.position()
			if ans.Entries[0].InboxSeq > cursor+1 {
				c.log.Error("sync page skips entries", "cursor", cursor, "first", ans.Entries[0].InboxSeq)
				return errInconsistent
			}
		}
		if !ans.HasMore {
			return nil
		}
	}
}

// applyTooLong jumps the cursor to the head of a too_long answer: it reads
// the rest of the conversation list, records the history holes between
// what the client knew of each conversation and its last seq, tells the
// app, saves, and hands over the list.
func (c *Client) applyTooLong(ctx context.Context, ans *protocol.SyncAnswer) error {
	recs := append([]Record(nil), ans.Conversations...)
	for next := ans.NextPage; next != nil; {
		page, err := c.api.conversations(ctx, next, c.cfg.ListPage)
		if err != nil {
			return fmt.Errorf("conversation list after too_long: %w", err)
		}
		recs = append(recs, page.Conversations...)
		next = page.NextPage
	}
	recs = latestRecords(recs)

	c.deliverMu.Lock()
	defer c.deliverMu.Unlock()
	c.mu.Lock()
	t := TooLong{PreviousEpoch: c.st.Epoch, PreviousCursor: c.st.Cursor, Epoch: ans.Epoch, Head: ans.Head,
		Conversations: recs, NewHoles: map[int64][]Hole{}, Stale: map[int64][]Hole{}}
	for _, r := range recs {
		var last int64
		if cs := c.st.Conversations[r.ConversationID]; cs != nil {
			last = cs.LastSeq
			// The jump may have skipped update entries of the messages
			// already delivered: they are to be read again.
			stale := holeSet(cs.Stale).add(1, cs.LastSeq)
			for _, h := range cs.Holes {
				stale = stale.remove(h.From, h.To)
			}
			if len(stale) > 0 {
				t.Stale[r.ConversationID] = stale
			}
		}
		if r.LastSeq > last {
			t.NewHoles[r.ConversationID] = []Hole{{From: last + 1, To: r.LastSeq}}
		}
	}
	c.mu.Unlock()
	c.log.Info("inbox too far behind, jumped to the head", "epoch", t.Epoch, "head", t.Head,
		"previous_epoch", t.PreviousEpoch, "previous_cursor", t.PreviousCursor, "conversations", len(recs))

	if h := c.cfg.Handler.OnTooLong; h != nil {
		if err := h(handlerCtx(ctx), t); err != nil {
			return fatal("OnTooLong(head %d): %w", t.Head, err)
		}
	}
	c.mu.Lock()
	c.st.Epoch, c.st.Cursor = t.Epoch, t.Head
	c.st.RecordVersion = max(c.st.RecordVersion, ans.RecordVersion)
	for _, r := range recs {
		cs := c.conv(r.ConversationID)
		if st, ok := t.Stale[r.ConversationID]; ok {
			cs.Stale = append([]Hole(nil), st...)
		}
		if h, ok := t.NewHoles[r.ConversationID]; ok {
			cs.Holes = holeSet(cs.Holes).add(h[0].From, h[0].To)
		}
		cs.LastSeq = max(cs.LastSeq, r.LastSeq)
		cs.Version = max(cs.Version, r.Version)
		c.st.RecordVersion = max(c.st.RecordVersion, r.Version)
	}
	c.mu.Unlock()
	if err := c.save(ctx); err != nil {
		return err
	}
	if h := c.cfg.Handler.OnConversations; h != nil {
		if err := h(handlerCtx(ctx), recs); err != nil {
			return fatal("OnConversations: %w", err)
		}
	}
	return nil
}

// BackfillResult is one Backfill step.
type BackfillResult struct {
	// Messages are the messages that filled holes, ascending by seq, in
	// their current state; none of them was delivered before, through
	// OnEntry or Backfill.
	Messages []Message
	// Updates are messages delivered before a too_long whose state changed
	// since the app was handed it (the jump skipped their update entries),
	// ascending by seq; Handler.OnUpdate received them too.
	Updates []Message
	// Remaining are the ranges still to read in the conversation: holes,
	// and ranges of delivered messages to read again for changes (see
	// ConversationState.Stale); empty when its history is complete and
	// current.
	Remaining []Hole
}

// toRead is what Backfill still has to read in cs: the holes and the
// stale ranges, merged.
func (cs *ConversationState) toRead() holeSet {
	out := append(holeSet(nil), cs.Holes...)
	for _, h := range cs.Stale {
		out = out.add(h.From, h.To)
	}
	return out
}

// Backfill reads the newest range of a conversation's history that is
// still to read by one page (Config.BackfillPage messages) of
// GET /v1/conversations/{cid}/messages, newest first, as a chat view
// scrolling up needs. Two kinds of ranges are read: history holes (messages
// never delivered, handed to OnHistory and returned in Messages) and, after
// a too_long, the messages delivered before it, whose changes the jump may
// have skipped (the changed ones are handed to OnUpdate and returned in
// Updates). Seqs of the page's range that the server does not return were
// never visible to the user and are closed too. Call it until Remaining is
// empty to fill the whole history.
//
// Messages come in their current state: a page read while an update entry
// of one of its messages was being delivered (the page then holds an older
// version than the app has) is read again.
//
// A message is handed over once across OnEntry and Backfill: whichever
// delivers it first wins, the other skips it. OnHistory (if set) receives
// the messages before the holes are marked filled; they are also returned.
// A conversation that no longer exists (404) or that the user may not read
// (403) has its holes dropped, and the error is returned.
//
// It is safe to call concurrently with Run, but not from a handler.
func (c *Client) Backfill(ctx context.Context, conversationID int64) (BackfillResult, error) {
	if inHandler(ctx) {
		return BackfillResult{}, ErrInHandler
	}
	c.mu.Lock()
	var hole Hole
	ok := false
	if cs := c.st.Conversations[conversationID]; cs != nil {
		hole, ok = cs.toRead().newest()
	}
	c.mu.Unlock()
	if !ok {
		return BackfillResult{}, nil
	}
	read := func() (*protocol.History, error) {
		ans, err := c.api.history(ctx, conversationID, hole.To+1, int(min(int64(c.cfg.BackfillPage), hole.Len())))
		if err != nil {
			return nil, fmt.Errorf("backfill conversation %d before %d: %w", conversationID, hole.To+1, err)
		}
		return ans, nil
	}
	ans, err := read()
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusForbidden) {
			c.mu.Lock()
			if cs := c.st.Conversations[conversationID]; cs != nil {
				cs.Holes, cs.Stale = nil, nil
			}
			c.mu.Unlock()
			if serr := c.save(ctx); serr != nil {
				return BackfillResult{}, serr
			}
		}
		return BackfillResult{}, err
	}

	c.deliverMu.Lock()
	defer c.deliverMu.Unlock()
	if c.olderThanApplied(conversationID, ans.Messages) {
		// An update entry came while the page was read. Read it again
		// while holding deliverMu: no change is handed over meanwhile, so
		// the new page is at least as new as what the app has.
		if ans, err = read(); err != nil {
			return BackfillResult{}, err
		}
	}
	// The page covers (lowest returned seq .. hole.To]; with nothing older
	// visible, everything down to seq 1.
	lo := int64(1)
	if ans.HasMore && len(ans.Messages) > 0 {
		lo = ans.Messages[0].Seq
	}

	fresh, updates := c.splitPage(conversationID, ans.Messages, lo, hole.To)
	if err := c.handOver(ctx, conversationID, fresh, updates); err != nil {
		return BackfillResult{}, err
	}
	c.mu.Lock()
	cs := c.conv(conversationID)
	for _, m := range fresh {
		cs.noteVersion(m.Seq, m.CurrentVersion())
	}
	for _, m := range updates {
		cs.noteVersion(m.Seq, m.CurrentVersion())
	}
	cs.Holes = holeSet(cs.Holes).remove(lo, hole.To)
	cs.Stale = holeSet(cs.Stale).remove(lo, hole.To)
	remaining := []Hole(cs.toRead())
	c.mu.Unlock()
	if err := c.save(ctx); err != nil {
		return BackfillResult{}, err
	}
	return BackfillResult{Messages: c.visible(fresh), Updates: c.visible(updates), Remaining: remaining}, nil
}

// splitPage sorts a history page's messages within [lo, hi]: those in a
// hole are fresh (for OnHistory), those in a stale range with a newer
// version than the app has are updates (for OnUpdate).
func (c *Client) splitPage(conversationID int64, msgs []Message, lo, hi int64) (fresh, updates []Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := c.st.Conversations[conversationID]
	if cs == nil {
		return nil, nil
	}
	holes, stale := holeSet(cs.Holes), holeSet(cs.Stale)
	for _, m := range msgs {
		switch {
		case m.Seq < lo || m.Seq > hi:
		case holes.contains(m.Seq):
			fresh = append(fresh, m)
		case stale.contains(m.Seq) && m.CurrentVersion() > cs.appliedVersion(m.Seq):
			updates = append(updates, m)
		}
	}
	return fresh, updates
}

// handOver gives a backfilled page to the app: the fresh messages to
// OnHistory, the newer states to OnUpdate.
func (c *Client) handOver(ctx context.Context, conversationID int64, fresh, updates []Message) error {
	fresh, updates = c.visible(fresh), c.visible(updates)
	if h := c.cfg.Handler.OnHistory; h != nil && len(fresh) > 0 {
		if err := h(handlerCtx(ctx), conversationID, fresh); err != nil {
			return fmt.Errorf("OnHistory(conversation %d): %w", conversationID, err)
		}
	}
	if h := c.cfg.Handler.OnUpdate; h != nil {
		for _, m := range updates {
			if err := h(handlerCtx(ctx), m); err != nil {
				return fmt.Errorf("OnUpdate(conversation %d, seq %d, version %d): %w",
					conversationID, m.Seq, m.CurrentVersion(), err)
			}
		}
	}
	return nil
}

// olderThanApplied reports whether a page holds a message in an older
// version than the app was handed.
func (c *Client) olderThanApplied(conversationID int64, msgs []Message) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := c.st.Conversations[conversationID]
	if cs == nil {
		return false
	}
	for i := range msgs {
		if msgs[i].CurrentVersion() < cs.appliedVersion(msgs[i].Seq) {
			return true
		}
	}
	return false
}

// Sync catches up over HTTP once: it pulls every entry after the cursor
// (handling too_long) and returns. For apps woken in the background, and
// tools that print and exit. It may run beside Run (both deliver in order,
// each entry once), but not inside a handler.
func (c *Client) Sync(ctx context.Context) error {
	if inHandler(ctx) {
		return ErrInHandler
	}
	if c.cfg.DisableSync {
		return ErrSyncDisabled
	}
	return c.pull(ctx, newSequencer(c))
}
