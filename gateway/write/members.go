package write

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/servers"
)

// Members is the write path of conversations, memberships and records:
// each write appends its events, then waits up to the ack wait for the
// projection to show them (woken by the hub, re-checked by a query), so
// that the caller's next request reads its own write. Running out of time
// is not an error: the append is certain, the projection follows. It is
// safe for concurrent use.
type Members struct {
	srv      *servers.Servers
	hub      *hub.Hub
	app      *Appender
	ackWait  time.Duration
	draining <-chan struct{}
}

// MembersConfig is what Members needs; every field is required.
type MembersConfig struct {
	// Servers: the id sequence is the catalog's, a conversation's state
	// its server's, a record's its user's.
	Servers  *servers.Servers
	Hub      *hub.Hub
	App      *Appender
	AckWait  time.Duration // how long a write waits for its projection
	Draining <-chan struct{}
}

// NewMembers makes the membership writes of cfg.
func NewMembers(cfg MembersConfig) *Members {
	return &Members{srv: cfg.Servers, hub: cfg.Hub, app: cfg.App, ackWait: cfg.AckWait, draining: cfg.Draining}
}

const (
	sqlNextConversationID = `SELECT nextval('conversation_ids')`
	// The created system message has the event's id as msg_id: it names
	// this creation, not any conversation that might hold the id.
	sqlCreateSettled = `SELECT EXISTS (SELECT 1 FROM messages WHERE msg_id = $2 AND conversation_id = $1),
	EXISTS (SELECT 1 FROM rejections WHERE event_id = $2)`
	// sqlCreatedBy finds a creation by its event id (the created system
	// message's msg_id): the conversation an earlier call with the same
	// key made, and whether the event was refused.
	sqlCreatedBy = `SELECT (SELECT conversation_id FROM messages WHERE msg_id = $1),
	EXISTS (SELECT 1 FROM rejections WHERE event_id = $1)`
	sqlMemberSettled = `SELECT EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $1 AND user_id = $2 AND left_seq IS NULL),
	EXISTS (SELECT 1 FROM rejections WHERE event_id = $3)`
	sqlRecordVersion = `SELECT COALESCE((SELECT record_version FROM users WHERE id = $1), 0)`
	// sqlRecordSettled: a record change is visible once the user's record
	// version moved past the one read before the append, or the record
	// already has the asked values (the change was a no-op).
	sqlRecordSettled = `SELECT COALESCE((SELECT record_version FROM users WHERE id = $1), 0) > $3
	OR COALESCE((SELECT ($4::boolean IS NULL OR pinned = $4) AND ($5::boolean IS NULL OR muted = $5)
		FROM records WHERE user_id = $1 AND conversation_id = $2), false)`
	// sqlReadSettled is sqlRecordSettled for a read position (capped at
	// the conversation's last seq by the projector).
	// sqlReadSettledAt is sqlReadSettled on the user's server of a
	// sharded placement, the conversation's last seq ($5) read on its own.
	sqlReadSettledAt = `SELECT COALESCE((SELECT record_version FROM users WHERE id = $1), 0) > $3
	OR COALESCE((SELECT read_seq >= LEAST($4::bigint, $5::bigint) FROM records WHERE user_id = $1 AND conversation_id = $2), false)`
	sqlLastSeq     = `SELECT COALESCE((SELECT last_seq FROM conversations WHERE id = $1), 0)`
	sqlReadSettled = `SELECT COALESCE((SELECT record_version FROM users WHERE id = $1), 0) > $3
	OR COALESCE((SELECT r.read_seq >= LEAST($4::bigint, c.last_seq)
		FROM records r JOIN conversations c ON c.id = r.conversation_id
		WHERE r.user_id = $1 AND r.conversation_id = $2), false)`
)

// errIDTaken is the answer to a creation the projection refused because
// its id exists: only possible if the sequence fell behind the log (a
// restore without replay's setval); a retry allocates a fresh id.
func errIDTaken(what string) error {
	return apierr.Unavailable("conversation id already taken, retry", time.Second,
		fmt.Errorf("conversation.created %s refused: id exists", what))
}

// NextConversationID allocates a conversation id from the
// conversation_ids sequence, so that a creation's key is known before its
// append.
func (m *Members) NextConversationID(ctx context.Context) (int64, error) {
	var cid int64
	if err := m.srv.Catalog().QueryRow(ctx, sqlNextConversationID).Scan(&cid); err != nil {
		return 0, fmt.Errorf("allocate conversation id: %w", err)
	}
	return cid, nil
}

// sqlKeyedConversationID allocates the id of keyed creation $1 once: a
// later or concurrent call with the same key gets the same id (DO UPDATE
// returns the row another call committed, which DO NOTHING would not).
const sqlKeyedConversationID = `INSERT INTO keyed_creations (event_id, conversation_id) VALUES ($1, nextval('conversation_ids'))
ON CONFLICT (event_id) DO UPDATE SET event_id = excluded.event_id RETURNING conversation_id`

// KeyedConversationID is NextConversationID for the creation eventID of
// a keyed call: every call with that event id gets the same id, so that
// they append one creation however many run at once.
func (m *Members) KeyedConversationID(ctx context.Context, eventID string) (int64, error) {
	var cid int64
	if err := m.srv.Catalog().QueryRow(ctx, sqlKeyedConversationID, eventID).Scan(&cid); err != nil {
		return 0, fmt.Errorf("allocate the conversation id of creation %s: %w", eventID, err)
	}
	return cid, nil
}

// Append appends e, a user-level event (events.UserLevel), without
// waiting for its projection: it moves no inbox, so no notification would
// wake a wait.
func (m *Members) Append(ctx context.Context, e *events.Event) error {
	return m.app.Append(ctx, e)
}

// Create appends e, a conversation.created by its actor (a member), and
// waits for its projection, so that an immediate follow-up (a send) finds
// the conversation.
func (m *Members) Create(ctx context.Context, e *events.Event) error {
	sub := m.hub.SubscribeUser(e.ActorID)
	defer sub.Close()
	if err := m.app.Append(ctx, e); err != nil {
		return err
	}
	var rejected bool
	if err := m.await(ctx, sub, func(ctx context.Context) (bool, error) {
		var exists bool
		err := m.srv.Conv(e.ConversationID).QueryRow(ctx, sqlCreateSettled, e.ConversationID, e.EventID).Scan(&exists, &rejected)
		return exists || rejected, err
	}); err != nil {
		return err
	}
	if rejected {
		return errIDTaken(fmt.Sprint(e.ConversationID))
	}
	return nil
}

// CreateAs appends e, a service's conversation.created whose event id
// derives from the call's idempotency key, and waits for its projection,
// woken by the notifications of watch (a member: every member gets the
// creation). It returns the conversation the event id made, which is
// another call's when a concurrent call with the same key won, or 0 when
// it was not projected within the wait (the append is certain).
func (m *Members) CreateAs(ctx context.Context, e *events.Event, watch int64) (int64, error) {
	sub := m.hub.SubscribeUser(watch)
	defer sub.Close()
	if err := m.app.Append(ctx, e); err != nil {
		return 0, err
	}
	var made int64
	err := m.await(ctx, sub, func(ctx context.Context) (bool, error) {
		var err error
		made, err = m.CreatedBy(ctx, e.EventID)
		return made != 0, err
	})
	return made, err
}

// CreatedBy is the conversation the creation eventID made, 0 if none
// yet; a refused creation is a retryable 503 (see Create).
func (m *Members) CreatedBy(ctx context.Context, eventID string) (int64, error) {
	// The conversation is not known yet: every server is asked (one, but
	// for a sharded placement), the one holding it answers.
	var cid *int64
	var rejected bool
	for _, db := range m.srv.Pools {
		var c *int64
		var r bool
		if err := db.QueryRow(ctx, sqlCreatedBy, eventID).Scan(&c, &r); err != nil {
			return 0, fmt.Errorf("creation %s: %w", eventID, err)
		}
		if c != nil {
			cid = c
		}
		rejected = rejected || r
	}
	if cid == nil && rejected {
		return 0, errIDTaken(eventID)
	}
	if cid == nil {
		return 0, nil
	}
	return *cid, nil
}

// ChangeMembers appends evs, member.added or member.removed events of one
// conversation (projected in order), and waits until the last one is
// settled: its user is (or, for a removal, is no longer) a member, or the
// event was refused. The wait is woken by watch's notifications and, with
// watchConv, by the conversation's: in read mode a member gets no entry
// of another member's join or removal.
func (m *Members) ChangeMembers(ctx context.Context, evs []*events.Event, watch int64, watchConv bool) error {
	last := evs[len(evs)-1]
	sub := m.hub.SubscribeUser(watch)
	defer sub.Close()
	if watchConv {
		defer m.hub.WatchConversations(sub, []int64{last.ConversationID})()
	}
	if err := m.app.AppendAll(ctx, evs); err != nil {
		return err
	}
	member := last.Type == events.MemberAdded
	return m.await(ctx, sub, func(ctx context.Context) (bool, error) {
		var is, rejected bool
		if err := m.srv.Conv(last.ConversationID).QueryRow(ctx, sqlMemberSettled, last.ConversationID, last.UserID, last.EventID).Scan(&is, &rejected); err != nil {
			return false, fmt.Errorf("membership of user %d in %d: %w", last.UserID, last.ConversationID, err)
		}
		return is == member || rejected, nil
	})
}

// ChangeRecord appends e, a record.updated or read.updated of its actor's
// own record, and waits until the actor's record version moved past the
// one read before the append, or the record already shows the change.
func (m *Members) ChangeRecord(ctx context.Context, e *events.Event) error {
	user, cid := e.ActorID, e.ConversationID
	settled, args := sqlRecordSettled, []any{e.Pinned, e.Muted}
	if e.Type == events.ReadUpdated {
		settled, args = sqlReadSettled, []any{*e.ReadSeq}
	}
	sub := m.hub.SubscribeUser(user)
	defer sub.Close()
	var v0 int64
	if err := m.srv.User(user).QueryRow(ctx, sqlRecordVersion, user).Scan(&v0); err != nil {
		return fmt.Errorf("record version of user %d: %w", user, err)
	}
	if err := m.app.Append(ctx, e); err != nil {
		return err
	}
	qargs := append([]any{user, cid, v0}, args...)
	return m.await(ctx, sub, func(ctx context.Context) (bool, error) {
		if m.srv.Sharded() && e.Type == events.ReadUpdated {
			return m.readSettledApart(ctx, qargs)
		}
		var done bool
		err := m.srv.User(user).QueryRow(ctx, settled, qargs...).Scan(&done)
		return done, err
	})
}

// await waits up to the ack wait until done reports true, re-checking on
// every wake-up of sub. Running out of time, or a drain, is not an error.
func (m *Members) await(ctx context.Context, sub *hub.Subscription, done func(context.Context) (bool, error)) error {
	timer := time.NewTimer(m.ackWait)
	defer timer.Stop()
	for {
		if ok, err := done(ctx); err != nil || ok {
			return err
		}
		select {
		case <-sub.C():
		case <-timer.C:
			return nil
		case <-m.draining:
			return nil
		case <-ctx.Done():
			return apierr.ErrClientGone
		}
	}
}

// readSettledApart is sqlReadSettled across servers: the conversation's
// last seq from its server, then the user's record on the user's.
// args: user, conversation, the version before, the read seq.
func (m *Members) readSettledApart(ctx context.Context, args []any) (bool, error) {
	cid := args[1].(int64)
	var last int64
	if err := m.srv.Conv(cid).QueryRow(ctx, sqlLastSeq, cid).Scan(&last); err != nil {
		return false, fmt.Errorf("last seq of %d: %w", cid, err)
	}
	var done bool
	err := m.srv.User(args[0].(int64)).QueryRow(ctx, sqlReadSettledAt, append(args, last)...).Scan(&done)
	return done, err
}

const sqlRoleSettled = `SELECT EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $1 AND user_id = $2 AND left_seq IS NULL AND role = $3),
	EXISTS (SELECT 1 FROM messages WHERE msg_id = $4 AND conversation_id = $1),
	(SELECT reason FROM rejections WHERE event_id = $4)`

// RoleOutcome is what became of a member.role_set: Applied (its system
// message exists: it changed the role), or Refused with the projection's
// reason; neither when it changed nothing or was not projected yet.
type RoleOutcome struct {
	Applied bool
	Refused string
}

// RoleOutcome reads what became of the member.role_set e.
func (m *Members) RoleOutcome(ctx context.Context, e *events.Event) (RoleOutcome, bool, error) {
	var has, applied bool
	var reason *string
	if err := m.srv.Conv(e.ConversationID).QueryRow(ctx, sqlRoleSettled, e.ConversationID, e.UserID, e.Role, e.EventID).Scan(
		&has, &applied, &reason); err != nil {
		return RoleOutcome{}, false, fmt.Errorf("role of user %d in %d: %w", e.UserID, e.ConversationID, err)
	}
	var out RoleOutcome
	out.Applied = applied
	if reason != nil {
		out.Refused = *reason
	}
	return out, has || applied || reason != nil, nil
}

// SetRole appends e, a member.role_set, and waits until it is settled:
// the member has the role, or the event was refused (the outcome says
// why). The wait is woken by watch's notifications and the
// conversation's (in read mode a member gets no entry of another's role).
func (m *Members) SetRole(ctx context.Context, e *events.Event, watch int64) (RoleOutcome, error) {
	return m.settle(ctx, e, watch, func(ctx context.Context) (RoleOutcome, bool, error) { return m.RoleOutcome(ctx, e) })
}

// settle appends e and waits until outcome says it is settled, woken by
// watch's notifications and those of e's conversation: the shape of every
// change to a conversation's members that answers with its outcome.
func (m *Members) settle(ctx context.Context, e *events.Event, watch int64,
	outcome func(context.Context) (RoleOutcome, bool, error)) (RoleOutcome, error) {
	sub := m.hub.SubscribeUser(watch)
	defer sub.Close()
	defer m.hub.WatchConversations(sub, []int64{e.ConversationID})()
	if err := m.app.Append(ctx, e); err != nil {
		return RoleOutcome{}, err
	}
	var out RoleOutcome
	err := m.await(ctx, sub, func(ctx context.Context) (bool, error) {
		var done bool
		var err error
		out, done, err = outcome(ctx)
		return done, err
	})
	return out, err
}

// sqlSanctionSettled reads whether user $2's sanction $3 in conversation
// $1 is as the event $4 asks ($5: set until $6, else lifted), whether the
// event made its system message, and its refusal.
const sqlSanctionSettled = `SELECT EXISTS (SELECT 1 FROM sanctions WHERE conversation_id = $1 AND user_id = $2 AND kind = $3
		AND until IS NOT DISTINCT FROM $6::timestamptz) = $5::boolean
	AND ($5::boolean OR NOT EXISTS (SELECT 1 FROM sanctions WHERE conversation_id = $1 AND user_id = $2 AND kind = $3)),
	EXISTS (SELECT 1 FROM messages WHERE msg_id = $4 AND conversation_id = $1),
	(SELECT reason FROM rejections WHERE event_id = $4)`

// SanctionOutcome reads what became of e, a member.banned, unbanned,
// muted or unmuted of sanction kind (projection.SanctionBan or
// SanctionMute), as RoleOutcome does for a role: settled once the user's
// sanction is as e asks, e made its system message, or was refused.
func (m *Members) SanctionOutcome(ctx context.Context, e *events.Event, kind string) (RoleOutcome, bool, error) {
	set := e.Type == events.MemberBanned || e.Type == events.MemberMuted
	var has, applied bool
	var reason *string
	if err := m.srv.Conv(e.ConversationID).QueryRow(ctx, sqlSanctionSettled, e.ConversationID, e.UserID, kind, e.EventID,
		set, e.Until).Scan(&has, &applied, &reason); err != nil {
		return RoleOutcome{}, false, fmt.Errorf("%s of user %d in %d: %w", kind, e.UserID, e.ConversationID, err)
	}
	out := RoleOutcome{Applied: applied}
	if reason != nil {
		out.Refused = *reason
	}
	return out, has || applied || reason != nil, nil
}

// Sanction appends e (see SanctionOutcome) and waits until it is settled,
// woken by watch's notifications and the conversation's.
func (m *Members) Sanction(ctx context.Context, e *events.Event, kind string, watch int64) (RoleOutcome, error) {
	return m.settle(ctx, e, watch, func(ctx context.Context) (RoleOutcome, bool, error) { return m.SanctionOutcome(ctx, e, kind) })
}
