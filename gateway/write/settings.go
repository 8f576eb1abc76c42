package write

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// Conversation settings (docs/protocol.md, "Frozen and slow mode"): the
// wait for a conversation.updated, the answer to a write into a frozen
// conversation, and the slow mode's admission of sends.

// FrozenError is the answer to a write of a member below admin in the
// frozen conversation cid (projection.ReasonFrozen).
func FrozenError(cid int64) error {
	return apierr.Forbidden("conversation %d is frozen: only its admins and owner may write", cid)
}

// sqlUpdateSettled reads whether conversation $1 has the settings the
// event $5 asks ($2 title, $3 frozen, $4 slow mode; NULL: not asked),
// whether the event made its system message, and its refusal.
const sqlUpdateSettled = `SELECT COALESCE((SELECT ($2::text IS NULL OR title = $2) AND ($3::boolean IS NULL OR frozen = $3)
		AND ($4::int IS NULL OR slow_mode = $4) FROM conversations WHERE id = $1), false),
	EXISTS (SELECT 1 FROM messages WHERE msg_id = $5 AND conversation_id = $1),
	(SELECT reason FROM rejections WHERE event_id = $5)`

// UpdateOutcome reads what became of e, a conversation.updated, as
// RoleOutcome does for a role: settled once the conversation has the
// settings e asks, e made its system message, or was refused.
func (m *Members) UpdateOutcome(ctx context.Context, e *events.Event) (RoleOutcome, bool, error) {
	var title *string
	if e.Title != "" {
		title = &e.Title
	}
	var has, applied bool
	var reason *string
	if err := m.srv.Conv(e.ConversationID).QueryRow(ctx, sqlUpdateSettled, e.ConversationID, title, e.Frozen, e.SlowMode,
		e.EventID).Scan(&has, &applied, &reason); err != nil {
		return RoleOutcome{}, false, fmt.Errorf("settings of conversation %d: %w", e.ConversationID, err)
	}
	out := RoleOutcome{Applied: applied}
	if reason != nil {
		out.Refused = *reason
	}
	return out, has || applied || reason != nil, nil
}

// UpdateConversation appends e, a conversation.updated, and waits until
// it is settled (UpdateOutcome), woken by watch's notifications (the
// actor, who gets the system message in write fan-out) and the
// conversation's (in read fan-out it gets none).
func (m *Members) UpdateConversation(ctx context.Context, e *events.Event, watch int64) (RoleOutcome, error) {
	return m.settle(ctx, e, watch, func(ctx context.Context) (RoleOutcome, bool, error) { return m.UpdateOutcome(ctx, e) })
}

// sqlSlowSend admits a send of msg_id $3 by user $2 to conversation $1 in
// slow mode ($4 seconds): one conditional upsert, so that exactly one send
// per interval is admitted whichever gateway it comes through (the row is
// locked by the upsert; a concurrent one waits for it and judges the time
// it wrote). The same msg_id again (a retry of an admitted send) is
// admitted without moving the time. Refused, the wait is read from the
// row as the statement's snapshot shows it: a send admitted concurrently
// is not in it, and the wait is then the whole interval.
const sqlSlowSend = `WITH up AS (
	INSERT INTO slow_sends AS s (conversation_id, user_id, last_at, msg_id) VALUES ($1, $2, now(), $3)
	ON CONFLICT (conversation_id, user_id) DO UPDATE
		SET last_at = CASE WHEN s.msg_id = excluded.msg_id THEN s.last_at ELSE excluded.last_at END, msg_id = excluded.msg_id
		WHERE s.msg_id = excluded.msg_id OR s.last_at <= now() - make_interval(secs => $4)
	RETURNING 1)
SELECT EXISTS (SELECT 1 FROM up),
	COALESCE((SELECT extract(epoch FROM last_at + make_interval(secs => $4) - now())::float8
		FROM slow_sends WHERE conversation_id = $1 AND user_id = $2), 0)`

// admitSlow admits a send of msgID by user to cid, whose slow mode is
// slow seconds, or refuses it with a 429 whose Retry-After is the time
// until the member's next send.
func (s *Sender) admitSlow(ctx context.Context, user, cid int64, msgID string, slow int) error {
	var ok bool
	var wait float64
	if err := s.srv.Conv(cid).QueryRow(ctx, sqlSlowSend, cid, user, msgID, slow).Scan(&ok, &wait); err != nil {
		return fmt.Errorf("slow mode of user %d in %d: %w", user, cid, err)
	}
	if ok {
		return nil
	}
	after := time.Duration(wait * float64(time.Second))
	if after <= 0 {
		after = time.Duration(slow) * time.Second
	}
	return SlowModeError(cid, slow, after)
}

// SlowModeError is the answer to a send refused by the slow mode of cid
// (slow seconds): a 429 in the rate limits' shape, retryable after after.
func SlowModeError(cid int64, slow int, after time.Duration) error {
	return &apierr.Error{Status: http.StatusTooManyRequests, Code: protocol.CodeRateLimited, Retryable: true, RetryAfter: after,
		Message: fmt.Sprintf("conversation %d is in slow mode: one message every %d s; retry after the Retry-After seconds", cid, slow)}
}

// slowModeApplies says whether a send by user, of role role, to a
// conversation in slow mode slow pays for the admission: a user below
// moderator (a service's own sender never does).
func slowModeApplies(user int64, role string, slow int) bool {
	return slow > 0 && user != 0 && !projection.SlowModeExempt(role)
}
