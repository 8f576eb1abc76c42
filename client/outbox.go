package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// The outbox: sends are queued (and saved) at once, whatever the network
// does, and retried with the same msg_id until they get a seq or a
// permanent refusal. The gateway deduplicates by msg_id, so a retry after a
// lost answer never makes a second message.
//
// Order: the oldest send whose outcome is unknown holds back the later
// ones, so the messages of one conversation keep the order of the Send
// calls. A send answered 202 pending is in the log (its place is fixed), so
// it no longer holds back the others; its seq comes from the inbox or from
// posting it again.

// maxResults bounds the finished sends kept for WaitSent.
const maxResults = 4096

// Send queues a text message to a conversation and returns its msg_id. The
// queue is saved before Send returns, so with a durable Store the message
// is sent even if the app restarts before Run gets to it. Send does not
// wait for the network; WaitSent (or Handler.OnSendResult) tells the
// outcome. An empty or invalid UTF-8 body is refused at once.
func (c *Client) Send(ctx context.Context, conversationID int64, body string) (string, error) {
	return c.enqueue(ctx, OutboxItem{ConversationID: conversationID, Body: body})
}

// SendReply is Send for a message that answers message replyTo of the same
// conversation (its Message.ReplyTo). It is queued, saved and retried like
// any send; a replyTo the user cannot see (or not below the new message's
// seq) is refused by the server with a 400 in the SendResult.
func (c *Client) SendReply(ctx context.Context, conversationID, replyTo int64, body string) (string, error) {
	if replyTo <= 0 {
		return "", fmt.Errorf("client: bad reply_to %d", replyTo)
	}
	return c.enqueue(ctx, OutboxItem{ConversationID: conversationID, ReplyTo: replyTo, Body: body})
}

// SendOptions are the optional parts of a message: the seq it answers and
// whom it mentions (user ids, current members, at most 50; MentionAll: every
// member, in conversations of at most the server's mention-all limit).
type SendOptions struct {
	ReplyTo    int64
	Mentions   []int64
	MentionAll bool
	// Attachments are the IDs of uploads (Client.Upload) to attach; with
	// any, the body may be empty.
	Attachments []string
}

// SendWith is Send with options. It is queued, saved and retried like any
// send; options the server refuses (a mention of a non-member, a reply to a
// message the user cannot see) come back as a 400 in the SendResult.
func (c *Client) SendWith(ctx context.Context, conversationID int64, body string, o SendOptions) (string, error) {
	if o.ReplyTo < 0 {
		return "", fmt.Errorf("client: bad reply_to %d", o.ReplyTo)
	}
	return c.enqueue(ctx, OutboxItem{ConversationID: conversationID, Body: body, ReplyTo: o.ReplyTo,
		Mentions: slices.Clone(o.Mentions), MentionAll: o.MentionAll, Attachments: slices.Clone(o.Attachments)})
}

// enqueue checks a send, gives it a msg_id, queues it and saves the queue.
func (c *Client) enqueue(ctx context.Context, it OutboxItem) (string, error) {
	if it.Body == "" && len(it.Attachments) == 0 {
		return "", errors.New("client: empty message body")
	}
	if !utf8.ValidString(it.Body) {
		return "", errors.New("client: message body is not valid UTF-8")
	}
	if it.ConversationID <= 0 {
		return "", fmt.Errorf("client: bad conversation id %d", it.ConversationID)
	}
	id := uuid.NewString()
	it.MsgID, it.Queued = id, time.Now().UTC()
	c.mu.Lock()
	c.st.Outbox = append(c.st.Outbox, it)
	c.mu.Unlock()
	if err := c.save(ctx); err != nil {
		c.mu.Lock()
		if i := c.outboxIndex(id); i >= 0 {
			c.st.Outbox = slices.Delete(c.st.Outbox, i, i+1)
		}
		c.mu.Unlock()
		return "", err
	}
	c.kickOutbox()
	return id, nil
}

// WaitSent waits until the send msgID ended and returns how (see
// SendResult). It needs Run to be running to make progress. The results of
// the last 4096 sends are kept. It may return before Handler.OnSendResult
// has run for the same send.
func (c *Client) WaitSent(ctx context.Context, msgID string) (SendResult, error) {
	c.mu.Lock()
	if r, ok := c.results[msgID]; ok {
		c.mu.Unlock()
		return r, nil
	}
	if c.outboxIndex(msgID) < 0 {
		c.mu.Unlock()
		return SendResult{}, fmt.Errorf("client: msg_id %s is not queued", msgID)
	}
	ch := make(chan SendResult, 1)
	c.waiters[msgID] = append(c.waiters[msgID], ch)
	c.mu.Unlock()
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return SendResult{}, ctx.Err()
	}
}

// Outbox returns the queued sends, oldest first.
func (c *Client) Outbox() []OutboxItem {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]OutboxItem(nil), c.st.Outbox...)
}

func (c *Client) outboxIndex(msgID string) int {
	if msgID == "" {
		return -1
	}
	for i := range c.st.Outbox {
		if c.st.Outbox[i].MsgID == msgID {
			return i
		}
	}
	return -1
}

func (c *Client) kickOutbox() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// finishSend removes a send from the outbox (if still there), saves, and
// reports r. A send finishes once: a second finish (the inbox and an answer
// racing) does nothing.
func (c *Client) finishSend(ctx context.Context, r SendResult) error {
	c.mu.Lock()
	i := c.outboxIndex(r.MsgID)
	if i < 0 {
		c.mu.Unlock()
		return nil
	}
	c.st.Outbox = slices.Delete(c.st.Outbox, i, i+1)
	waiters := c.recordResultLocked(r)
	c.mu.Unlock()
	err := c.save(ctx)
	c.sendDone(ctx, r, waiters)
	return err
}

// recordResultLocked keeps r for WaitSent, in the same step as the send
// leaves the outbox (so that a WaitSent always finds it in one of them),
// and returns the waiters to tell. Called with mu held.
func (c *Client) recordResultLocked(r SendResult) []chan SendResult {
	c.results[r.MsgID] = r
	c.resultOrder = append(c.resultOrder, r.MsgID)
	if len(c.resultOrder) > maxResults {
		delete(c.results, c.resultOrder[0])
		c.resultOrder = c.resultOrder[1:]
	}
	ws := c.waiters[r.MsgID]
	delete(c.waiters, r.MsgID)
	return ws
}

// sendDone tells the waiters and the app how a send ended.
func (c *Client) sendDone(ctx context.Context, r SendResult, waiters []chan SendResult) {
	for _, ch := range waiters {
		ch <- r
	}
	if r.Err != nil {
		// The app gets the error in OnSendResult / WaitSent.
		c.log.Debug("send refused", "msg_id", r.MsgID, "conversation_id", r.ConversationID, "err", r.Err)
	}
	if h := c.cfg.Handler.OnSendResult; h != nil {
		h(ctx, r)
	}
}

// nextSend picks the send to attempt now: the oldest one not yet appended,
// else the appended one whose recheck is due. When none is due, wait says
// how long until one is (0: none at all).
func (c *Client) nextSend(recheck map[string]time.Time, now time.Time) (it OutboxItem, wait time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var due time.Time
	for _, o := range c.st.Outbox {
		if !o.Appended {
			return o, 0, true
		}
		at := recheck[o.MsgID]
		if !at.After(now) {
			return o, 0, true
		}
		if due.IsZero() || at.Before(due) {
			due = at
		}
	}
	if due.IsZero() {
		return OutboxItem{}, 0, false
	}
	return OutboxItem{}, due.Sub(now), false
}

// sendPermanent reports whether err refuses the message itself (not the
// client): 400, 403, 404, 409, 413, 422.
func sendPermanent(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) || ae.Temporary() {
		return false
	}
	return ae.Status != http.StatusUnauthorized
}

// runOutbox sends the queued messages until ctx ends or the client is
// refused (401).
func (c *Client) runOutbox(ctx context.Context) error {
	pol := newPolicy(&c.cfg, c.newRand())
	rc := newRechecks()
	for {
		it, wait, ok := c.nextSend(rc.at, time.Now())
		if !ok {
			if !c.waitForSend(ctx, wait) {
				return nil
			}
			continue
		}
		c.countAttempt(it.MsgID)
		m, err := c.sendOnce(ctx, it)
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil && m != nil:
			pol.reset()
			rc.forget(it.MsgID)
			if err := c.finishSend(ctx, SendResult{MsgID: it.MsgID, ConversationID: it.ConversationID, Message: m}); err != nil {
				return err
			}
		case err == nil: // 202 pending: in the log, the seq comes later
			c.log.Debug("send pending", "msg_id", it.MsgID, "conversation_id", it.ConversationID)
			pol.succeeded()
			rc.schedule(it.MsgID, &c.cfg)
			if err := c.markAppended(ctx, it.MsgID); err != nil {
				return err
			}
		case sendPermanent(err):
			pol.succeeded()
			rc.forget(it.MsgID)
			if err := c.finishSend(ctx, SendResult{MsgID: it.MsgID, ConversationID: it.ConversationID, Err: err}); err != nil {
				return err
			}
		default:
			if p := permanent(err); p != nil {
				return p // 401: the client itself is refused
			}
			wait, opened := pol.failed(err, false, 0)
			c.log.Info("send failed, retrying", "msg_id", it.MsgID, "conversation_id", it.ConversationID,
				"err", err, "retry_in", wait, "circuit_open", opened)
			if !sleepCtx(ctx, wait) {
				return nil
			}
		}
	}
}

// waitForSend waits until Send queues a message, a pending send's recheck
// is due (wait; 0: none is), or ctx ends; false when ctx ended.
func (c *Client) waitForSend(ctx context.Context, wait time.Duration) bool {
	var timer <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
	case <-c.kick:
	case <-timer:
	}
	return ctx.Err() == nil
}

// countAttempt counts an attempt of a queued send (saved with the next
// change of the state).
func (c *Client) countAttempt(msgID string) {
	c.mu.Lock()
	if i := c.outboxIndex(msgID); i >= 0 {
		c.st.Outbox[i].Attempts++
	}
	c.mu.Unlock()
}

// markAppended records that a send is in the log (202 pending), so that it
// no longer holds back the later ones, and saves that.
func (c *Client) markAppended(ctx context.Context, msgID string) error {
	c.mu.Lock()
	changed := false
	if i := c.outboxIndex(msgID); i >= 0 && !c.st.Outbox[i].Appended {
		c.st.Outbox[i].Appended, changed = true, true
	}
	c.mu.Unlock()
	if !changed {
		return nil
	}
	return c.save(ctx)
}

// rechecks schedules posting again the sends answered 202 pending: after
// PendingRecheck, then doubling up to BackoffMax, per send. It is owned by
// runOutbox.
type rechecks struct {
	at    map[string]time.Time     // when to post the send again, by msg_id
	delay map[string]time.Duration // the last delay, by msg_id
}

func newRechecks() *rechecks {
	return &rechecks{at: map[string]time.Time{}, delay: map[string]time.Duration{}}
}

// schedule sets the next recheck of a pending send.
func (r *rechecks) schedule(msgID string, cfg *Config) {
	d := r.delay[msgID]
	if d == 0 {
		d = cfg.PendingRecheck
	} else {
		d = min(2*d, max(cfg.BackoffMax, cfg.PendingRecheck))
	}
	r.delay[msgID] = d
	r.at[msgID] = time.Now().Add(d)
}

// forget drops a send that ended.
func (r *rechecks) forget(msgID string) {
	delete(r.at, msgID)
	delete(r.delay, msgID)
}

// sendOnce makes one attempt: over the WebSocket when one is up (and
// allowed), else HTTP. nil message and nil error is 202 pending.
func (c *Client) sendOnce(ctx context.Context, it OutboxItem) (*Message, error) {
	if !c.cfg.SendOverHTTP {
		c.mu.Lock()
		s := c.sess
		c.mu.Unlock()
		if s != nil {
			return s.send(ctx, it)
		}
	}
	return c.api.send(ctx, it, 0)
}

// sleepCtx sleeps d unless ctx ends first; it reports whether it slept.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
