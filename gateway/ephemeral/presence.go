package ephemeral

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// Presence: a user is online while a live gateway has a row of them in
// presence_sessions. This gateway writes its row at the user's first local
// session and deletes it when the grace after the last one ended; each
// write takes the user's advisory lock and compares the user's state
// across gateways before and after, so that exactly the transitions are
// published (pg_notify in the same transaction: the notifications of one
// user come in the order of the changes).

// lockClass is the first key of the per-user advisory locks of presence
// (the two-int4 form, its own key space beside the projector's bigint
// keys); the second is the user id modulo 2^31 (two users sharing one only
// wait for each other).
const lockClass = 0x70726573 // "pres"

const sqlLockUser = `SELECT pg_advisory_xact_lock($1::int4, ($2::bigint % 2147483648)::int4)`

// liveRow is whether a live gateway (heartbeat younger than $expiry) other
// than $gw holds user $u; a SQL fragment with those three parameters.
const liveRow = `EXISTS (SELECT 1 FROM presence_sessions s JOIN presence_gateways g ON g.gateway_id = s.gateway_id
	WHERE s.user_id = %[1]s AND s.gateway_id <> %[2]s AND g.heartbeat_at > now() - %[3]s * interval '1 second')`

// sqlUp writes this gateway's row of a user and reports whether the user
// was offline before (no other live row) and does not hide presence.
var sqlUp = fmt.Sprintf(`WITH ins AS (INSERT INTO presence_sessions (user_id, gateway_id) VALUES ($1, $2)
	ON CONFLICT DO NOTHING RETURNING 1)
SELECT (SELECT count(*) FROM ins) > 0 AND NOT %s
	AND NOT EXISTS (SELECT 1 FROM user_settings WHERE user_id = $1 AND hide_presence)`, fmt.Sprintf(liveRow, "$1", "$2", "$3"))

// sqlDown deletes this gateway's row of a user; when no other live row is
// left it stores the last seen, and reports whether to publish (not
// hidden).
var sqlDown = fmt.Sprintf(`WITH del AS (DELETE FROM presence_sessions WHERE user_id = $1 AND gateway_id = $2 RETURNING 1),
gone AS (SELECT (SELECT count(*) FROM del) > 0 AND NOT %s AS offline),
seen AS (INSERT INTO presence_last_seen (user_id, last_seen) SELECT $1, $4 FROM gone WHERE offline
	ON CONFLICT (user_id) DO UPDATE SET last_seen = EXCLUDED.last_seen RETURNING 1)
SELECT offline AND NOT EXISTS (SELECT 1 FROM user_settings WHERE user_id = $1 AND hide_presence) FROM gone`,
	fmt.Sprintf(liveRow, "$1", "$2", "$3"))

const sqlNotify = `SELECT pg_notify($1, $2)`

// syncShard is the presence work of one shard of users: the users whose
// row may have to change, and what this gateway has written.
type syncShard struct {
	mu      sync.Mutex
	pending map[int64]struct{}
	written map[int64]bool // users whose row this gateway has (worker only, and resync)
	conns   map[int64]bool // users whose connection row this gateway has
	wake    chan struct{}
}

func newSyncShard() *syncShard {
	return &syncShard{pending: map[int64]struct{}{},
		written: map[int64]bool{}, conns: map[int64]bool{}, wake: make(chan struct{}, 1)}
}

// The connection rows (no grace), read by the notifier: a user with a row
// of a live gateway is connected.
const (
	sqlConnect    = `INSERT INTO connections (user_id, gateway_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`
	sqlDisconnect = `DELETE FROM connections WHERE user_id = $1 AND gateway_id = $2`
)

// syncConnection writes or deletes this gateway's connection row of user
// as its local sessions say.
func (s *Service) syncConnection(ctx context.Context, sh *syncShard, user int64) error {
	want := s.connected(user)
	sh.mu.Lock()
	have := sh.conns[user]
	sh.mu.Unlock()
	if want == have {
		return nil
	}
	sql := sqlDisconnect
	if want {
		sql = sqlConnect
	}
	if _, err := s.pool.Exec(ctx, sql, user, s.cfg.GatewayID); err != nil {
		return fmt.Errorf("connection of user %d: %w", user, err)
	}
	sh.mu.Lock()
	if want {
		sh.conns[user] = true
	} else {
		delete(sh.conns, user)
	}
	sh.mu.Unlock()
	return nil
}

// want asks the user's shard to bring the user's row in line with the
// local sessions.
func (s *Service) want(user int64) {
	sh := s.sync[uint64(user)%workers]
	sh.mu.Lock()
	sh.pending[user] = struct{}{}
	sh.mu.Unlock()
	select {
	case sh.wake <- struct{}{}:
	default:
	}
}

// syncLoop writes and deletes the rows of one shard's users until ctx
// ends; a failed write is tried again a second later.
func (s *Service) syncLoop(ctx context.Context, sh *syncShard) {
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sh.wake:
		case <-retry.C:
		}
		sh.mu.Lock()
		users := sh.pending
		sh.pending = map[int64]struct{}{}
		sh.mu.Unlock()
		failed := false
		for u := range users {
			if err := s.syncUser(ctx, sh, u); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Warn("presence write failed", "user_id", u, "err", err)
				failed = true
				sh.mu.Lock()
				sh.pending[u] = struct{}{}
				sh.mu.Unlock()
			}
		}
		if failed {
			retry.Reset(time.Second)
		}
	}
}

// syncUser writes or deletes this gateway's row of user as its local
// sessions say, and publishes the user's transition, if any.
func (s *Service) syncUser(ctx context.Context, sh *syncShard, user int64) error {
	if s.halted.Load() {
		return nil
	}
	if err := s.syncConnection(ctx, sh, user); err != nil {
		return err
	}
	want := s.wantOnline(user)
	sh.mu.Lock()
	have := sh.written[user]
	sh.mu.Unlock()
	if want == have {
		return nil
	}
	now := time.Now()
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLockUser, lockClass, user); err != nil {
			return err
		}
		var publish bool
		var err error
		if want {
			err = tx.QueryRow(ctx, sqlUp, user, s.cfg.GatewayID, secs(s.cfg.PresenceExpiry)).Scan(&publish)
		} else {
			err = tx.QueryRow(ctx, sqlDown, user, s.cfg.GatewayID, secs(s.cfg.PresenceExpiry), now).Scan(&publish)
		}
		if err != nil || !publish {
			return err
		}
		p := projection.Presence{User: user, Online: want}
		if !want {
			p.LastSeen = now.UnixMilli()
		}
		_, err = tx.Exec(ctx, sqlNotify, s.cfg.Channel, string(projection.AppendPresence(nil, p)))
		if err == nil {
			s.m.transitions.WithLabelValues(stateName(want)).Inc()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("presence of user %d: %w", user, err)
	}
	sh.mu.Lock()
	if want {
		sh.written[user] = true
	} else {
		delete(sh.written, user)
	}
	sh.mu.Unlock()
	return nil
}

func stateName(online bool) string {
	if online {
		return "online"
	}
	return "offline"
}

// deliverPresence pushes a presence change of p.User to the local
// sessions of the users who share a current conversation with them (never
// to p.User's own sessions).
func (s *Service) deliverPresence(ctx context.Context, p projection.Presence) error {
	if s.localCount() == 0 {
		return nil
	}
	// Every partner, not only the local ones: partners are bounded (the
	// members of write-mode conversations), the local users are not (a
	// list of 17,000 ids sent with each of 17,000 connects' presence was
	// gigabytes of parameters); deliver skips users with no session here.
	users, err := s.partners(ctx, p.User)
	if err != nil || len(users) == 0 {
		return err
	}
	f := protocol.PresenceFrame{Type: protocol.FramePresence, Presence: protocol.Presence{UserID: p.User, Online: p.Online}}
	if p.LastSeen > 0 {
		t := time.UnixMilli(p.LastSeen).UTC()
		f.LastSeen = &t
	}
	frame, err := protocol.Marshal(f)
	if err != nil {
		return err
	}
	s.deliver(ctx, users, p.User, protocol.FramePresence, frame)
	return nil
}

// sqlPartners are the users who share a current write-mode conversation
// with $1, but $1. Read-mode conversations (large ones and
// channels, docs/large-conversations.md) share no presence: a member of a
// 100,000-member channel going online would be a frame to every connected
// member and a join over all of them (the statement took most of
// PostgreSQL's time while 15,000 members connected: docs/decisions.md,
// "Measured reasons behind defaults").
//
// The write-mode conversations are picked first (MATERIALIZED): joined in
// one query, the planner may read the members of every conversation of
// $1, a 100,000-member one included, before dropping it.
const sqlPartners = `WITH mine AS MATERIALIZED (SELECT a.conversation_id FROM member_spans a
	JOIN conversations c ON c.id = a.conversation_id AND NOT c.read_fanout
	WHERE a.user_id = $1 AND a.left_seq IS NULL)
SELECT DISTINCT b.user_id FROM mine
JOIN member_spans b ON b.conversation_id = mine.conversation_id AND b.left_seq IS NULL
WHERE b.user_id <> $1`

// partners runs sqlPartners on every server (a user's conversations are
// on any of them) and returns the users it found, each once.
func (s *Service) partners(ctx context.Context, user int64) ([]int64, error) {
	if !s.srv.Sharded() {
		rows, _ := s.pool.Query(ctx, sqlPartners, user)
		return pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	var all []int64
	for _, pool := range s.srv.Pools {
		rows, _ := pool.Query(ctx, sqlPartners, user)
		users, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return nil, err
		}
		all = append(all, users...)
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

// queryUsers runs a query of user ids with parameters $1 and $2 on pool.
func queryUsers(ctx context.Context, pool *pgxpool.Pool, sql string, a int64, local []int64, more ...any) ([]int64, error) {
	rows, err := pool.Query(ctx, sql, append([]any{a, local}, more...)...)
	if err != nil {
		return nil, err
	}
	users, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	return users, nil
}
