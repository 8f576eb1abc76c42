package ephemeral

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// What a user may see of others' presence (GET /v1/presence), and the
// presence a change of the hide_presence setting publishes.

// sqlLookup is the presence of the users $2 that $1 may see: $1 itself
// and the users sharing a current write-mode conversation with $1 (as
// sqlPartners), in user id order, with whether each hides its presence.
var sqlLookup = fmt.Sprintf(lookupOf, `q.u = $1 OR EXISTS (SELECT 1 FROM member_spans a
	JOIN conversations c ON c.id = a.conversation_id AND NOT c.read_fanout
	JOIN member_spans b ON b.conversation_id = a.conversation_id AND b.left_seq IS NULL AND b.user_id = q.u
	WHERE a.user_id = $1 AND a.left_seq IS NULL)`)

// lookupOf is the presence of the users $2 that the condition picks.
var lookupOf = fmt.Sprintf(`SELECT q.u, %s, ls.last_seen, COALESCE(st.hide_presence, false)
FROM (SELECT DISTINCT u FROM unnest($2::bigint[]) u) q
LEFT JOIN presence_last_seen ls ON ls.user_id = q.u
LEFT JOIN user_settings st ON st.user_id = q.u
WHERE %%s
ORDER BY q.u`, fmt.Sprintf(liveRow, "q.u", "'00000000-0000-0000-0000-000000000000'::uuid", "$3"))

// On several servers the partners are found on every server, among the
// users asked for ($2), and the presence read on the catalog for them
// ($4) and $1.
var sqlLookupGiven = fmt.Sprintf(lookupOf, `q.u = $1 OR q.u = ANY($4::bigint[])`)

// sqlPartnersAmong are those of $2 who share a current write-mode
// conversation on this server with $1.
const sqlPartnersAmong = `SELECT DISTINCT b.user_id FROM member_spans a
	JOIN conversations c ON c.id = a.conversation_id AND NOT c.read_fanout
	JOIN member_spans b ON b.conversation_id = a.conversation_id AND b.left_seq IS NULL AND b.user_id = ANY($2::bigint[])
	WHERE a.user_id = $1 AND a.left_seq IS NULL`

// lookupRows runs the lookup of users for asker: one statement on one
// server, a scatter for the partners and then the catalog's on several.
func (s *Service) lookupRows(ctx context.Context, asker int64, users []int64) (pgx.Rows, error) {
	if !s.srv.Sharded() {
		return s.pool.Query(ctx, sqlLookup, asker, users, secs(s.cfg.PresenceExpiry))
	}
	var seen []int64
	for _, pool := range s.srv.Pools {
		found, err := queryUsers(ctx, pool, sqlPartnersAmong, asker, users)
		if err != nil {
			return nil, err
		}
		seen = append(seen, found...)
	}
	return s.pool.Query(ctx, sqlLookupGiven, asker, users, secs(s.cfg.PresenceExpiry), seen)
}

// Lookup returns the presence of users as asker may see it: users who
// share no current conversation with asker are left out (as are unknown
// ids: the answer does not tell them apart); one who hides their presence
// is offline without a last seen, to everyone but themselves.
func (s *Service) Lookup(ctx context.Context, asker int64, users []int64) ([]protocol.Presence, error) {
	rows, err := s.lookupRows(ctx, asker, users)
	if err != nil {
		return nil, fmt.Errorf("presence for user %d: %w", asker, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (protocol.Presence, error) {
		var p protocol.Presence
		var hidden bool
		if err := r.Scan(&p.UserID, &p.Online, &p.LastSeen, &hidden); err != nil {
			return p, err
		}
		if hidden && p.UserID != asker {
			p.Online, p.LastSeen = false, nil
		}
		if p.Online {
			p.LastSeen = nil
		}
		if p.LastSeen != nil {
			t := p.LastSeen.UTC()
			p.LastSeen = &t
		}
		return p, nil
	})
	if err != nil {
		return nil, fmt.Errorf("presence for user %d: %w", asker, err)
	}
	return out, nil
}

// sqlState is a user's presence as stored: online (a live row), last seen.
var sqlState = fmt.Sprintf(`SELECT %s, (SELECT last_seen FROM presence_last_seen WHERE user_id = $1)`,
	fmt.Sprintf(liveRow, "$1", "'00000000-0000-0000-0000-000000000000'::uuid", "$2"))

// LockUser takes user's presence lock in tx: a change of the user's
// hide_presence setting takes it before it reads the setting, so that it
// and the user's presence transitions publish in order.
func LockUser(ctx context.Context, tx pgx.Tx, user int64) error {
	if _, err := tx.Exec(ctx, sqlLockUser, lockClass, user); err != nil {
		return fmt.Errorf("lock presence of user %d: %w", user, err)
	}
	return nil
}

// Announce publishes, in tx (which holds LockUser), user's presence as
// others see it once hidden is the user's hide_presence: offline without
// a last seen when hidden, else the stored state.
func (s *Service) Announce(ctx context.Context, tx pgx.Tx, user int64, hidden bool) error {
	p := projection.Presence{User: user}
	if !hidden {
		var last *time.Time
		if err := tx.QueryRow(ctx, sqlState, user, secs(s.cfg.PresenceExpiry)).Scan(&p.Online, &last); err != nil {
			return fmt.Errorf("presence of user %d: %w", user, err)
		}
		if !p.Online && last != nil {
			p.LastSeen = last.UnixMilli()
		}
	}
	if _, err := tx.Exec(ctx, sqlNotify, s.cfg.Channel, string(projection.AppendPresence(nil, p))); err != nil {
		return fmt.Errorf("announce presence of user %d: %w", user, err)
	}
	s.m.transitions.WithLabelValues(stateName(p.Online)).Inc()
	return nil
}
