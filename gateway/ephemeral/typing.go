package ephemeral

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
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

// sqlTypingNotify notifies $4 on channel $3 if $2 is a current member of
// conversation $1: one statement, a row when it was sent.
const sqlTypingNotify = `SELECT pg_notify($3, $4) FROM member_spans
WHERE conversation_id = $1 AND user_id = $2 AND left_seq IS NULL`

// sqlMembersOf are the users of $2 who are current members of $1.
const sqlMembersOf = `SELECT user_id FROM member_spans
WHERE conversation_id = $1 AND left_seq IS NULL AND user_id = ANY($2)`

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
	rows, err := s.pool.Query(ctx, sqlTypingNotify, cid, user, s.cfg.Channel, string(projection.AppendTyping(nil, t)))
	if err != nil {
		s.m.typing.WithLabelValues(OutcomeFailed).Inc()
		return OutcomeFailed, fmt.Errorf("typing of user %d in %d: %w", user, cid, err)
	}
	sent := rows.Next()
	rows.Close()
	if err := rows.Err(); err != nil {
		s.m.typing.WithLabelValues(OutcomeFailed).Inc()
		return OutcomeFailed, fmt.Errorf("typing of user %d in %d: %w", user, cid, err)
	}
	if !sent {
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
		// A start may follow at once (the user typed again after sending).
		s.typing[k] = typingState{at: st.at}
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
	return s.deliverToMembers(ctx, sqlMembersOf, t.Conv, t.User, protocol.FrameTyping, f)
}

// deliverToMembers pushes frame (of kind) to the local sessions of the
// users sql selects among this gateway's ($1 conv, $2 the local users,
// then more), but from's: the members a frame about from concerns.
func (s *Service) deliverToMembers(ctx context.Context, sql string, conv, from int64, kind string, frame any, more ...any) error {
	local := s.localUsers()
	if len(local) == 0 || (len(local) == 1 && local[0] == from) {
		return nil
	}
	users, err := s.queryUsers(ctx, sql, conv, local, more...)
	if err != nil {
		return err
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
	s.deliver(to, kind, b)
	return nil
}
