package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/inboxd/inboxd/protocol"
)

// The changes of a message after it was sent (docs/protocol.md, "Changing a
// message"): edit, delete, a reaction set or removed. Each is one request
// with a change_id, the change's idempotency key, retried with the same
// change_id while the failure is temporary, so that a change whose answer
// was lost applies once. Unlike sends they are not queued: the app waits
// for the outcome (a UI shows the edit at once and rolls it back on a
// refusal). They go over HTTP even while a WebSocket is up, because the
// HTTP answer carries the whole message and the change_ack frame only its
// version.

// ChangeKind is what a Change does to a message.
type ChangeKind string

// The kinds of change.
const (
	ChangeEdit    ChangeKind = "edit"    // new text (the sender only, within the edit window)
	ChangeDelete  ChangeKind = "delete"  // the sender, or the conversation's creator
	ChangeReact   ChangeKind = "react"   // set the user's reaction (replacing another of the user's)
	ChangeUnreact ChangeKind = "unreact" // remove the user's reaction
)

// Change is one change of a message.
type Change struct {
	Kind           ChangeKind
	ConversationID int64
	Seq            int64
	// ChangeID is the idempotency key of every attempt (a uuid). Empty:
	// ApplyChange makes one. Give the ChangeID of an earlier result to try
	// a change again (after a pending answer, say) without applying it
	// twice.
	ChangeID string
	Body     string // ChangeEdit
	Emoji    string // ChangeReact
}

// ChangeResult is how a change ended.
type ChangeResult struct {
	// Change is the change as made, with its ChangeID.
	Change Change
	// Message is the message after the change, as the user sees it
	// (Version, EditedAt, Deleted, Reactions with Me on the user's own);
	// nil when Pending.
	Message *Message
	// Pending: the change is in the log but was not projected within the
	// gateway's ack wait. It will apply (or be refused) in log order; the
	// update entry comes through Handler.OnUpdate, or ApplyChange with the
	// same Change answers the message once it is projected.
	Pending bool
}

// Edit replaces the text of a message the user sent. See ApplyChange.
func (c *Client) Edit(ctx context.Context, conversationID, seq int64, body string) (ChangeResult, error) {
	return c.ApplyChange(ctx, Change{Kind: ChangeEdit, ConversationID: conversationID, Seq: seq, Body: body})
}

// Delete deletes a message: the user's own, or any message of a
// conversation the user created. It keeps its seq, loses its body and
// reactions. Deleting a deleted message changes nothing. See ApplyChange.
func (c *Client) Delete(ctx context.Context, conversationID, seq int64) (ChangeResult, error) {
	return c.ApplyChange(ctx, Change{Kind: ChangeDelete, ConversationID: conversationID, Seq: seq})
}

// React sets the user's reaction to a message (one emoji per user: it
// replaces the user's previous one). See ApplyChange.
func (c *Client) React(ctx context.Context, conversationID, seq int64, emoji string) (ChangeResult, error) {
	return c.ApplyChange(ctx, Change{Kind: ChangeReact, ConversationID: conversationID, Seq: seq, Emoji: emoji})
}

// Unreact removes the user's reaction to a message (none: nothing
// changes). See ApplyChange.
func (c *Client) Unreact(ctx context.Context, conversationID, seq int64) (ChangeResult, error) {
	return c.ApplyChange(ctx, Change{Kind: ChangeUnreact, ConversationID: conversationID, Seq: seq})
}

// ApplyChange makes a change of a message and returns the message after
// it, or Pending. Temporary failures (network errors, lost or cut answers,
// 408, 429, 5xx) are retried with the same ChangeID, after the server's
// Retry-After or the client's backoff (BackoffInitial doubling to
// BackoffMax, full jitter), until ctx ends: give ctx a deadline. A refusal
// is an *APIError: 403 not_member or forbidden (someone else's message), 404
// (no such message the user can see), 400 (a deleted message, the edit
// window passed, a system message, a bad emoji), 413. A change that
// changes nothing (the same text, a reaction the user has) answers the
// message as it is.
//
// It does not need Run and does not touch the client's state: the change
// reaches this device too as an update entry (OnUpdate). It is safe for
// concurrent use, also from a handler.
func (c *Client) ApplyChange(ctx context.Context, ch Change) (ChangeResult, error) {
	if err := ch.validate(); err != nil {
		return ChangeResult{Change: ch}, err
	}
	if ch.ChangeID == "" {
		ch.ChangeID = uuid.NewString()
	}
	pol := newPolicy(&c.cfg, c.newRand())
	for {
		m, err := c.api.change(ctx, ch)
		if err == nil {
			return ChangeResult{Change: ch, Message: m, Pending: m == nil}, nil
		}
		if ctx.Err() != nil || !changeRetryable(err) {
			return ChangeResult{Change: ch}, err
		}
		wait, _ := pol.failed(err, false, 0)
		c.log.Info("change failed, retrying", "change", ch.Kind, "change_id", ch.ChangeID,
			"conversation_id", ch.ConversationID, "seq", ch.Seq, "err", err, "retry_in", wait)
		if !sleepCtx(ctx, wait) {
			return ChangeResult{Change: ch}, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		}
	}
}

func (ch *Change) validate() error {
	if ch.ConversationID <= 0 || ch.Seq <= 0 {
		return fmt.Errorf("client: bad message %d/%d", ch.ConversationID, ch.Seq)
	}
	switch ch.Kind {
	case ChangeEdit:
		if ch.Body == "" {
			return errors.New("client: empty message body")
		}
		if !utf8.ValidString(ch.Body) {
			return errors.New("client: message body is not valid UTF-8")
		}
	case ChangeReact:
		if ch.Emoji == "" || !utf8.ValidString(ch.Emoji) {
			return errors.New("client: a reaction needs an emoji")
		}
	case ChangeDelete, ChangeUnreact:
	default:
		return fmt.Errorf("client: unknown change %q", ch.Kind)
	}
	return nil
}

// changeRetryable reports whether trying the same change again can
// succeed: everything but a refusal of the gateway (a non-temporary
// *APIError) and the client's own encoding errors.
func changeRetryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Temporary()
	}
	var ue *encodeError
	return !errors.As(err, &ue)
}

// change makes one attempt of ch: the message after it, or nil for 202
// pending.
func (a *api) change(ctx context.Context, ch Change) (*Message, error) {
	path := "/v1/conversations/" + strconv.FormatInt(ch.ConversationID, 10) + "/messages/" + strconv.FormatInt(ch.Seq, 10)
	var method string
	var body any
	switch ch.Kind {
	case ChangeEdit:
		method, body = http.MethodPatch, protocol.EditMessage{ChangeID: ch.ChangeID, Body: ch.Body}
	case ChangeDelete:
		method, body = http.MethodDelete, protocol.ChangeOnly{ChangeID: ch.ChangeID}
	case ChangeReact:
		method, body = http.MethodPut, protocol.SetReaction{ChangeID: ch.ChangeID, Emoji: ch.Emoji}
		path += "/reaction"
	case ChangeUnreact:
		method, body = http.MethodDelete, protocol.ChangeOnly{ChangeID: ch.ChangeID}
		path += "/reaction"
	default:
		return nil, &encodeError{fmt.Errorf("unknown change %q", ch.Kind)}
	}
	var m Message // a 202's {"change_id","status"} leaves it empty
	status, _, err := a.do(ctx, method, path, nil, body, nil, &m, 0)
	if err != nil {
		return nil, err
	}
	if status == http.StatusAccepted || m.Seq == 0 {
		return nil, nil
	}
	return &m, nil
}

// encodeError is a request the client could not even encode: no retry
// helps.
type encodeError struct{ err error }

func (e *encodeError) Error() string { return e.err.Error() }
func (e *encodeError) Unwrap() error { return e.err }
