package client

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"github.com/inboxd/inboxd/protocol"
)

// Large conversations (docs/large-conversations.md): a conversation in read
// mode writes no inbox entry per member and message; the server lists it,
// with its last seq and change count, in every sync answer, too-long answer
// and welcome (and in large frames), and pushes its messages in messages
// frames to sessions that said "large" in their hello. The client reads
// what it lacks with GET /v1/conversations/{cid}/messages?after= (new
// messages) and ?changed_after= (changes), and hands the messages to
// OnEntry as message entries with InboxSeq 0, in seq order, each once, and
// the changes to OnUpdate. Everything runs under deliverMu, as entries do;
// the inbox cursor does not move.

// LargeConv is where a read-mode conversation is (protocol.LargeConv).
type LargeConv = protocol.LargeConv

// noteLarge takes the server's whole list of the user's read-mode
// conversations: those in it are marked read-mode, the others no longer
// are. It is saved with the next save.
func (c *Client) noteLarge(list []LargeConv) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := make(map[int64]bool, len(list))
	for _, h := range list {
		in[h.ConversationID] = true
		if cs := c.conv(h.ConversationID); !cs.Large {
			cs.Large = true
			c.uncommitted++
		}
	}
	for id, cs := range c.st.Conversations {
		if cs.Large && !in[id] {
			cs.Large = false
			c.uncommitted++
		}
	}
}

// catchUpLarge reads, for each head of the list, the messages beyond the
// last seq delivered and the changes beyond the change count applied.
func (c *Client) catchUpLarge(ctx context.Context, list []LargeConv) error {
	for _, h := range list {
		if err := c.catchUpHead(ctx, h); err != nil {
			return err
		}
	}
	return c.commit(ctx)
}

// largeAnswer is noteLarge and catchUpLarge: the list of an answer or a frame.
func (c *Client) largeAnswer(ctx context.Context, list []LargeConv) error {
	c.noteLarge(list)
	return c.catchUpLarge(ctx, list)
}

func (c *Client) catchUpHead(ctx context.Context, h LargeConv) error {
	c.deliverMu.Lock()
	defer c.deliverMu.Unlock()
	c.mu.Lock()
	cs := c.conv(h.ConversationID)
	behind, changed := h.LastSeq > cs.LastSeq, h.ChangeCount > cs.ChangeCount
	c.mu.Unlock()
	if !behind && !changed {
		return nil
	}
	if behind {
		if err := c.readNewLocked(ctx, h.ConversationID, h.LastSeq, false); err != nil {
			return c.largeReadFailed(ctx, h.ConversationID, err)
		}
	}
	if changed {
		if err := c.readChangesLocked(ctx, h.ConversationID, h.ChangeCount); err != nil {
			return c.largeReadFailed(ctx, h.ConversationID, err)
		}
	}
	return c.commit(ctx)
}

// largeReadFailed: a conversation the user can no longer read (403, 404)
// is no longer followed (the next list says whether it still is); other
// errors are the session's, retried.
func (c *Client) largeReadFailed(ctx context.Context, cid int64, err error) error {
	var ae *APIError
	if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusForbidden) {
		c.log.Warn("read-mode conversation not readable", "conversation", cid, "err", err)
		c.mu.Lock()
		if cs := c.st.Conversations[cid]; cs != nil {
			cs.Large = false
		}
		c.mu.Unlock()
		return c.commit(ctx)
	}
	return err
}

// readNewLocked reads GET …/messages?after=<last seq delivered> pages and
// delivers them, until target is reached and the server says there is no
// more. bounded: stop at target (the gap before an entry or a frame's
// first message): messages beyond it are not delivered, pages are sized
// to the gap. Once read, the last seq is at least target (seqs the server
// does not return are not visible to the user). Called with deliverMu held.
func (c *Client) readNewLocked(ctx context.Context, cid, target int64, bounded bool) error {
	for {
		c.mu.Lock()
		last := c.conv(cid).LastSeq
		c.mu.Unlock()
		if bounded && last >= target {
			return nil
		}
		limit := c.cfg.BackfillPage
		if bounded {
			limit = int(min(int64(limit), target-last))
		}
		ans, err := c.api.historyAfter(ctx, cid, last, limit)
		if err != nil {
			return err
		}
		msgs := slices.Clone(ans.Messages)
		slices.SortFunc(msgs, func(a, b Message) int { return cmpInt(a.Seq, b.Seq) })
		progress := false
		for i := range msgs {
			m := msgs[i]
			if m.Seq <= last || (bounded && m.Seq > target) {
				continue
			}
			m.ConversationID = cid
			if err := c.deliverLargeLocked(ctx, m); err != nil {
				return err
			}
			progress = true
		}
		if err := c.commit(ctx); err != nil {
			return err
		}
		c.mu.Lock()
		cs := c.conv(cid)
		done := !ans.HasMore || !progress || (bounded && cs.LastSeq >= target)
		if done && cs.LastSeq < target {
			cs.LastSeq = target
			c.uncommitted++
		}
		c.mu.Unlock()
		if done {
			return c.commit(ctx)
		}
	}
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// deliverLargeLocked hands message m of a read-mode conversation to OnEntry
// as a message entry with InboxSeq 0, unless the app has it (a seq up to
// the last delivered, not in a hole), and records it (last seq, version,
// the send it completes). Called with deliverMu held.
func (c *Client) deliverLargeLocked(ctx context.Context, m Message) error {
	e := Entry{InboxSeq: 0, ConversationID: m.ConversationID, Kind: KindMessage, Message: &m}
	c.mu.Lock()
	cs := c.conv(m.ConversationID)
	had := m.Seq <= cs.LastSeq && !holeSet(cs.Holes).contains(m.Seq)
	c.mu.Unlock()
	if had {
		return c.updateLargeLocked(ctx, m)
	}
	if h := c.cfg.Handler.OnEntry; h != nil && !c.hidden(&m) {
		if err := h(handlerCtx(ctx), e); err != nil {
			return fatal("OnEntry(conversation %d, seq %d, read mode): %w", m.ConversationID, m.Seq, err)
		}
	}
	c.mu.Lock()
	done, waiters := c.recordLocked(e)
	c.uncommitted++
	c.mu.Unlock()
	if done != nil {
		if err := c.save(ctx); err != nil {
			return err
		}
		c.sendDone(ctx, *done, waiters)
	}
	return nil
}

// updateLargeLocked hands a changed message to OnUpdate when the app has
// the message and an older version of it. Called with deliverMu held.
func (c *Client) updateLargeLocked(ctx context.Context, m Message) error {
	c.mu.Lock()
	cs := c.conv(m.ConversationID)
	newer := m.Seq <= cs.LastSeq && !holeSet(cs.Holes).contains(m.Seq) && m.CurrentVersion() > cs.appliedVersion(m.Seq)
	c.mu.Unlock()
	if !newer {
		return nil
	}
	if h := c.cfg.Handler.OnUpdate; h != nil && !c.hidden(&m) {
		if err := h(handlerCtx(ctx), m); err != nil {
			return fatal("OnUpdate(conversation %d, seq %d, version %d, read mode): %w",
				m.ConversationID, m.Seq, m.CurrentVersion(), err)
		}
	}
	c.mu.Lock()
	cs.noteVersion(m.Seq, m.CurrentVersion())
	c.uncommitted++
	c.mu.Unlock()
	return nil
}

// readChangesLocked reads GET …/messages?changed_after=<change count
// applied> pages, hands the newer versions to OnUpdate and moves the
// change count applied to target (or beyond). Called with deliverMu held.
func (c *Client) readChangesLocked(ctx context.Context, cid, target int64) error {
	for {
		c.mu.Lock()
		applied := c.conv(cid).ChangeCount
		c.mu.Unlock()
		ans, err := c.api.historyChanged(ctx, cid, applied, c.cfg.BackfillPage)
		if err != nil {
			return err
		}
		ord := applied
		for i := range ans.Messages {
			m := ans.Messages[i]
			m.ConversationID = cid
			if err := c.updateLargeLocked(ctx, m); err != nil {
				return err
			}
			ord = max(ord, m.ChangedOrd)
		}
		done := !ans.HasMore || ord <= applied
		if done {
			ord = max(ord, target)
		}
		c.mu.Lock()
		cs := c.conv(cid)
		cs.ChangeCount = max(cs.ChangeCount, ord)
		c.uncommitted++
		c.mu.Unlock()
		if err := c.commit(ctx); err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// gapBeforeLocked reads the messages of a conversation between the last
// seq delivered and seq (exclusive), before an inbox entry or a frame's
// message at seq is delivered, so that seq order holds without a hole.
//
// For a conversation known read-mode the gap is its messages without
// entries. For one not (or no longer) known read-mode, a gap before an
// entry means seqs the user could not see (the server returns none of
// them: one empty read) or messages of a read-mode span the client did not
// follow: the conversation switched down before the client read its tail
// (the large list drops it at once), or it went up and down while the
// client was away. Those are read too, and then the changes the client
// lacks (?changed_after=): changes made in read mode write no update
// entries. A conversation the client knows nothing of (its first entry)
// has no gap. Called with deliverMu held.
func (c *Client) gapBeforeLocked(ctx context.Context, cid, seq int64) error {
	c.mu.Lock()
	cs := c.st.Conversations[cid]
	gap := cs != nil && (cs.Large || cs.LastSeq > 0) && seq > cs.LastSeq+1
	large := gap && cs.Large
	c.mu.Unlock()
	if !gap {
		return nil
	}
	if err := c.readNewLocked(ctx, cid, seq-1, true); err != nil {
		return c.largeReadFailed(ctx, cid, err)
	}
	if !large {
		if err := c.readChangesLocked(ctx, cid, 0); err != nil {
			return c.largeReadFailed(ctx, cid, err)
		}
	}
	return nil
}

// messagesFrame applies a messages frame: its messages continuing the last
// seq delivered (a gap before them read first, duplicates dropped), then
// the rest up to the frame's last seq, then its changes. trusted says the
// session saw this conversation's previous change count (the welcome's, a
// large frame's or the previous frame's) and it is the one applied: the
// frame's changed list is then complete; otherwise the changes are read
// with ?changed_after=.
func (c *Client) messagesFrame(ctx context.Context, f *protocol.ServerFrame, trusted bool) error {
	cid := f.ConversationID
	if cid == 0 {
		return nil
	}
	c.deliverMu.Lock()
	defer c.deliverMu.Unlock()
	c.mu.Lock()
	c.conv(cid).Large = true
	c.mu.Unlock()
	msgs := slices.Clone(f.Messages)
	slices.SortFunc(msgs, func(a, b Message) int { return cmpInt(a.Seq, b.Seq) })
	for i := range msgs {
		m := msgs[i]
		m.ConversationID = cid
		if err := c.gapBeforeLocked(ctx, cid, m.Seq); err != nil {
			return err
		}
		if err := c.deliverLargeLocked(ctx, m); err != nil {
			return err
		}
	}
	c.mu.Lock()
	cs := c.conv(cid)
	behind := f.LastSeq > cs.LastSeq && cs.Large
	c.mu.Unlock()
	if behind {
		if err := c.readNewLocked(ctx, cid, f.LastSeq, false); err != nil {
			if err := c.largeReadFailed(ctx, cid, err); err != nil {
				return err
			}
		}
	}
	if trusted {
		for i := range f.Changed {
			m := f.Changed[i]
			m.ConversationID = cid
			if err := c.updateLargeLocked(ctx, m); err != nil {
				return err
			}
		}
		c.mu.Lock()
		cs.ChangeCount = max(cs.ChangeCount, f.ChangeCount)
		c.uncommitted++
		c.mu.Unlock()
	} else if f.ChangeCount > cs.ChangeCount {
		if err := c.readChangesLocked(ctx, cid, f.ChangeCount); err != nil {
			if err := c.largeReadFailed(ctx, cid, err); err != nil {
				return err
			}
		}
	}
	return c.commit(ctx)
}

// changeCount is the change count applied of conversation cid.
func (c *Client) changeCount(cid int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs := c.st.Conversations[cid]; cs != nil {
		return cs.ChangeCount
	}
	return 0
}
