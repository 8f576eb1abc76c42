package ephemeral

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
	"github.com/jackc/pgx/v5"
)

// Typing: a member's typing frame is checked here (rate limits, then
// membership), notified on the ephemeral channel, and delivered by every
// gateway to its local sessions of the conversation's other current
// members.

type typingKey struct{ user, conv int64 }

// typingState is the last typing broadcast of a user in a conversation
// from this gateway.
type typingState struct {
	at     time.Time // of the last start broadcast
	active bool      // started and not stopped
}

// sqlMuted says whether $2 is muted in conversation $1 now, or below
// admin in it while it is frozen: such a member's typing is dropped
// (docs/protocol.md, "Ban and mute" and "Frozen and slow mode").
const sqlMuted = `(EXISTS (SELECT 1 FROM sanctions WHERE conversation_id = $1 AND user_id = $2 AND kind = 'mute'
	AND (until IS NULL OR until > now()))
	OR EXISTS (SELECT 1 FROM conversations fc JOIN member_spans fs ON fs.conversation_id = fc.id AND fs.user_id = $2
		AND fs.left_seq IS NULL WHERE fc.id = $1 AND fc.frozen AND fs.role NOT IN ('` + events.RoleOwner + `', '` + events.RoleAdmin + `')))`

// sqlTypingNotify notifies $4 on channel $3 if $2 is a current member of
// conversation $1 and not muted: one statement, a row when $2 is a
// member, saying whether it is muted (then nothing was sent).
const sqlTypingNotify = `SELECT m.muted FROM (SELECT ` + sqlMuted + ` AS muted FROM member_spans
	WHERE conversation_id = $1 AND user_id = $2 AND left_seq IS NULL) m
LEFT JOIN LATERAL (SELECT pg_notify($3, $4) WHERE NOT m.muted) n ON true`

// sqlIsMember says whether $2 is a current member of conversation $1, and
// whether it is muted there.
const sqlIsMember = `SELECT EXISTS (SELECT 1 FROM member_spans
WHERE conversation_id = $1 AND user_id = $2 AND left_seq IS NULL), ` + sqlMuted

// notifyTyping sends t on the ephemeral channel if its user is a current
// member and not muted, and says whether it is a member and whether it is
// muted: one statement on one server; two when the conversation is on
// another server than the channel's (the catalog).
func (s *Service) notifyTyping(ctx context.Context, t projection.Typing) (member, muted bool, err error) {
	payload := string(projection.AppendTyping(nil, t))
	if s.srv.OfConv(t.Conv) != 0 {
		if err := s.srv.Conv(t.Conv).QueryRow(ctx, sqlIsMember, t.Conv, t.User).Scan(&member, &muted); err != nil || !member || muted {
			return member, muted, err
		}
		_, err := s.pool.Exec(ctx, sqlNotify, s.cfg.Channel, payload)
		return err == nil, false, err
	}
	rows, err := s.pool.Query(ctx, sqlTypingNotify, t.Conv, t.User, s.cfg.Channel, payload)
	if err != nil {
		return false, false, err
	}
	if rows.Next() {
		member = true
		err = rows.Scan(&muted)
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	return member, muted, err
}

// typingAudience: the current members of $1 (see audience).
var typingAudience = audience{
	byConv: `SELECT c.member_count <= $2, ARRAY(SELECT s.user_id FROM member_spans s
	WHERE s.conversation_id = $1 AND s.left_seq IS NULL AND c.member_count <= $2)
FROM conversations c WHERE c.id = $1`,
	byList: `SELECT user_id FROM member_spans
WHERE conversation_id = $1 AND left_seq IS NULL AND user_id = ANY($2)`,
}

// Typing broadcasts that user types in conversation cid (stop: no
// longer) and returns the outcome (Outcome*). A start within
// TypingInterval of the last one, a stop with nothing to stop and a frame
// beyond the user's write bucket are dropped without an error; a user who
// is not a current member gets apierr.NotMember. Errors are the client's
// (apierr).
func (s *Service) Typing(ctx context.Context, user, cid int64, stop bool) (string, error) {
	outcome := s.typingAllowed(user, cid, stop, time.Now())
	if outcome == OutcomeBroadcast {
		if st := s.limits.Take(user, time.Now()); !st.Allowed() {
			outcome = OutcomeRateLimited
		}
	}
	if outcome != OutcomeBroadcast {
		s.m.typing.WithLabelValues(outcome).Inc()
		return outcome, nil
	}
	t := projection.Typing{Conv: cid, User: user, ExpiresMS: s.cfg.TypingExpiry.Milliseconds()}
	if stop {
		t.ExpiresMS = 0
	}
	member, muted, err := s.notifyTyping(ctx, t)
	if err != nil {
		s.m.typing.WithLabelValues(OutcomeFailed).Inc()
		return OutcomeFailed, fmt.Errorf("typing of user %d in %d: %w", user, cid, err)
	}
	if muted {
		// Dropped without an error, as a frame over the limits is.
		s.m.typing.WithLabelValues(OutcomeIgnored).Inc()
		return OutcomeIgnored, nil
	}
	if !member {
		s.m.typing.WithLabelValues(OutcomeNotMember).Inc()
		return OutcomeNotMember, apierr.NotMember("not a member of conversation %d", cid)
	}
	s.m.typing.WithLabelValues(OutcomeBroadcast).Inc()
	return OutcomeBroadcast, nil
}

// typingAllowed applies the per-gateway limits of one user's typing in one
// conversation and records what will be broadcast. A non-member's frames
// are limited too, so that they cost at most one query per interval.
func (s *Service) typingAllowed(user, cid int64, stop bool, now time.Time) string {
	k := typingKey{user, cid}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.typing[k]
	live := st.active && now.Sub(st.at) < s.cfg.TypingExpiry
	switch {
	case stop && !live:
		return OutcomeIgnored
	case stop:
		// A start may follow at once (the user typed again after
		// sending): the stop clears the interval too. The write bucket
		// each broadcast costs still bounds a start/stop loop.
		delete(s.typing, k)
		return OutcomeBroadcast
	case now.Sub(st.at) < s.cfg.TypingInterval:
		return OutcomeRateLimited
	}
	s.typing[k] = typingState{at: now, active: true}
	if len(s.typing) > 1024 && len(s.typing)%1024 == 0 {
		s.sweepTypingLocked(now)
	}
	return OutcomeBroadcast
}

// sweepTypingLocked forgets the limits that no longer limit anything.
func (s *Service) sweepTypingLocked(now time.Time) {
	for k, st := range s.typing {
		if now.Sub(st.at) >= max(s.cfg.TypingInterval, s.cfg.TypingExpiry) {
			delete(s.typing, k)
		}
	}
}

// deliverTyping pushes a typing notification to the local sessions of the
// conversation's current members, but the typer's.
func (s *Service) deliverTyping(ctx context.Context, t projection.Typing) error {
	f := protocol.TypingEvent{Type: protocol.FrameTyping, ConversationID: t.Conv, UserID: t.User,
		State: protocol.TypingStart, ExpiresInMS: t.ExpiresMS}
	if t.ExpiresMS == 0 {
		f.State = protocol.TypingStop
	}
	return s.deliverToMembers(ctx, typingAudience, t.Conv, t.User, protocol.FrameTyping, f)
}

// audience says who of a conversation's current members a frame is for,
// in two statements ($1 the conversation, the caller's arguments from
// $3). byConv reads them when the conversation has at most $2 members
// (this gateway's user count): a row (true, the members) then, (false,
// none) when it has more, and no row when nothing is to be delivered.
// byList picks them among this gateway's users ($2), for the conversation
// with more members than there are users here. Either way the statement
// is bounded by the smaller side: a gateway of 17,000 users sent them all
// as a parameter (136 KB) for every typing frame of a 3-member
// conversation, and a 100,000-member conversation is never read whole.
type audience struct{ byConv, byList string }

// deliverToMembers pushes frame (of kind) to the local sessions of the
// users a selects, but from's: the members a frame about from concerns.
func (s *Service) deliverToMembers(ctx context.Context, a audience, conv, from int64, kind string, frame any, more ...any) error {
	n := s.localCount()
	if n == 0 || (n == 1 && s.connected(from)) {
		return nil
	}
	var small bool
	var users []int64
	pool := s.srv.Conv(conv)
	err := pool.QueryRow(ctx, a.byConv, append([]any{conv, n}, more...)...).Scan(&small, &users)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return err
	case !small:
		if users, err = queryUsers(ctx, pool, a.byList, conv, s.localUsers(), more...); err != nil {
			return err
		}
	}
	to := users[:0]
	for _, u := range users {
		if u != from {
			to = append(to, u)
		}
	}
	if len(to) == 0 {
		return nil
	}
	b, err := protocol.Marshal(frame)
	if err != nil {
		return err
	}
	s.deliver(ctx, to, from, kind, b) // skips the users without a session here
	return nil
}
