package ephemeral

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/projection"
)

// The gateways' heartbeats and the reaping of dead ones: every
// PresenceExpiry/3 a gateway refreshes its row in presence_gateways and
// deletes the rows older than PresenceExpiry; whoever deletes a dead
// gateway's row (one gateway: the delete decides) deletes its presence rows
// too and publishes offline for its users whom no live gateway holds.

// sqlBeat refreshes this gateway's heartbeat; inserted is true when the row
// was missing (first beat, or reaped while this gateway could not reach
// PostgreSQL: its rows are gone and must be written again).
const sqlBeat = `INSERT INTO presence_gateways (gateway_id, heartbeat_at, placement_version) VALUES ($1, now(), NULLIF($2::bigint, 0))
ON CONFLICT (gateway_id) DO UPDATE SET heartbeat_at = now(), placement_version = excluded.placement_version RETURNING xmax = 0`

// sqlRetire makes a stopping gateway's heartbeat expire after the grace
// ($2 = expiry - grace, in seconds): its users go offline then, unless
// they reconnected elsewhere.
const sqlRetire = `UPDATE presence_gateways SET heartbeat_at = now() - $2 * interval '1 second' WHERE gateway_id = $1`

const sqlDeadGateways = `SELECT gateway_id::text FROM presence_gateways WHERE heartbeat_at < now() - $1 * interval '1 second'`

// sqlReapGateway deletes a dead gateway's row unless another gateway did
// first (or it beat again since).
const sqlReapGateway = `DELETE FROM presence_gateways WHERE gateway_id = $1 AND heartbeat_at < now() - $2 * interval '1 second'
RETURNING heartbeat_at`

const sqlDeadRows = `WITH c AS (DELETE FROM connections WHERE gateway_id = $1)
DELETE FROM presence_sessions WHERE gateway_id = $1 RETURNING user_id`

// sqlLockUsers takes the presence locks of users in one order.
const sqlLockUsers = `SELECT pg_advisory_xact_lock($1::int4, (u % 2147483648)::int4)
FROM (SELECT DISTINCT u FROM unnest($2::bigint[]) u ORDER BY 1) x`

// sqlGone stores the last seen of the users of $1 whom no live gateway
// holds and returns those who do not hide their presence.
var sqlGone = fmt.Sprintf(`WITH gone AS (SELECT u FROM unnest($1::bigint[]) u WHERE NOT %s),
seen AS (INSERT INTO presence_last_seen (user_id, last_seen) SELECT u, $3 FROM gone
	ON CONFLICT (user_id) DO UPDATE SET last_seen = GREATEST(presence_last_seen.last_seen, EXCLUDED.last_seen) RETURNING 1)
SELECT u FROM gone WHERE NOT EXISTS (SELECT 1 FROM user_settings WHERE user_id = u AND hide_presence)`,
	fmt.Sprintf(liveRow, "u", "'00000000-0000-0000-0000-000000000000'::uuid", "$2"))

// heartbeatLoop beats and reaps until ctx ends.
func (s *Service) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.PresenceExpiry / 3)
	defer t.Stop()
	for {
		if !s.halted.Load() {
			if err := s.beat(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("presence heartbeat failed", "err", err)
			}
		}
		s.mu.Lock()
		s.sweepTypingLocked(time.Now())
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beat refreshes the heartbeat (writing every local user's row again if
// this gateway had been reaped) and reaps the dead gateways.
func (s *Service) beat(ctx context.Context) error {
	var inserted bool
	if err := s.pool.QueryRow(ctx, sqlBeat, s.cfg.GatewayID, s.cfg.PlacementVersion).Scan(&inserted); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if inserted {
		s.resync()
	}
	rows, err := s.pool.Query(ctx, sqlDeadGateways, secs(s.cfg.PresenceExpiry))
	if err != nil {
		return fmt.Errorf("find dead gateways: %w", err)
	}
	gone, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("find dead gateways: %w", err)
	}
	for _, id := range gone {
		if err := s.reap(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// resync forgets what this gateway wrote and writes the rows of its users
// again (publishing them online where they are not).
func (s *Service) resync() {
	for _, sh := range s.sync {
		sh.mu.Lock()
		clear(sh.written)
		sh.mu.Unlock()
	}
	s.mu.Lock()
	users := make([]int64, 0, len(s.local)+len(s.grace))
	for u := range s.local {
		users = append(users, u)
	}
	for u := range s.grace {
		users = append(users, u)
	}
	s.mu.Unlock()
	for _, u := range users {
		s.want(u)
	}
}

// reap deletes a dead gateway and its presence rows, and publishes offline
// for its users now offline, last seen at its last heartbeat. Of several
// gateways reaping at once, the one whose delete finds the row does it.
func (s *Service) reap(ctx context.Context, gateway string) error {
	var offline []int64
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var last time.Time
		if err := tx.QueryRow(ctx, sqlReapGateway, gateway, secs(s.cfg.PresenceExpiry)).Scan(&last); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		}
		rows, err := tx.Query(ctx, sqlDeadRows, gateway)
		if err != nil {
			return err
		}
		users, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(users) == 0 {
			return err
		}
		if _, err := tx.Exec(ctx, sqlLockUsers, lockClass, users); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, sqlGone, users, secs(s.cfg.PresenceExpiry), last)
		if err != nil {
			return err
		}
		if offline, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return err
		}
		return s.notifyPresence(ctx, tx, offline, last)
	})
	if err != nil {
		return fmt.Errorf("reap gateway %s: %w", gateway, err)
	}
	s.m.transitions.WithLabelValues("offline").Add(float64(len(offline)))
	s.log.Info("reaped a dead gateway's presence", "gateway", gateway, "offline", len(offline))
	return nil
}

// notifyPresence publishes users offline since last, as few payloads as fit.
func (s *Service) notifyPresence(ctx context.Context, tx pgx.Tx, users []int64, last time.Time) error {
	var b []byte
	flush := func() error {
		if len(b) == 0 {
			return nil
		}
		_, err := tx.Exec(ctx, sqlNotify, s.cfg.Channel, string(b))
		b = b[:0]
		return err
	}
	for _, u := range users {
		if len(b) > projection.MaxPayload-64 {
			if err := flush(); err != nil {
				return err
			}
		}
		b = projection.AppendPresence(b, projection.Presence{User: u, LastSeen: last.UnixMilli()})
	}
	return flush()
}
