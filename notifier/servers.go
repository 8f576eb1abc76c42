package notifier

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/projection"
)

// Servers places a notifier on one server of a sharded deployment
// (docs/scaling.md): it consumes that server's partitions of the event
// log (Owns), waits for that server's conversation stage, and queues,
// claims and delivers the notifications of that server's conversations
// in that server's database, as one notifier does on one server. What
// lives elsewhere is read where it lives: the settings and the
// connections on the catalog, a member's inbox on the member's server,
// and its totals summed over every server (each counts its own
// conversations from the copies of the members' records it keeps). Run
// one notifier (or more, sharing the server's group) per server.
type Servers struct {
	Catalog *pgxpool.Pool
	All     []*pgxpool.Pool // every server's, the catalog's first
	OfUser  func(user int64) *pgxpool.Pool
	Owns    func(partition int32) bool
}

// sharded reports whether the notifier serves one server of several.
func (n *Notifier) sharded() bool { return n.cfg.Servers != nil }

const (
	// sqlMembersOf are the members, past and present, of conversations $1
	// (a superset of those a message may notify).
	sqlMembersOf = `SELECT DISTINCT user_id FROM member_spans WHERE conversation_id = ANY($1::bigint[])`
	// sqlNotificationsOff are those of users $1 who turned notifications off.
	sqlNotificationsOff = `SELECT user_id FROM user_settings WHERE user_id = ANY($1::bigint[]) AND NOT notifications`
	// sqlDueUsers are the users of this server's due notifications.
	sqlDueUsers = `SELECT DISTINCT user_id FROM notifications
	WHERE state = 'pending' AND kind = 'message' AND due_at <= now() AND (claimed_until IS NULL OR claimed_until < now())`
	// sqlConnectedOf are those of users $1 connected to a live gateway ($2
	// the presence expiry in ms).
	sqlConnectedOf = `SELECT DISTINCT c.user_id FROM connections c JOIN presence_gateways g ON g.gateway_id = c.gateway_id
	WHERE c.user_id = ANY($1::bigint[]) AND g.heartbeat_at > now() - $2 * interval '1 millisecond'`
	// sqlSkipUsers settles the due notifications of users $1 as skipped.
	sqlSkipUsers = `WITH s AS (UPDATE notifications n SET state = 'skipped', done_at = now(), claimed_until = NULL
	WHERE n.state = 'pending' AND n.kind = 'message' AND n.due_at <= now() AND (n.claimed_until IS NULL OR n.claimed_until < now())
		AND n.user_id = ANY($1::bigint[])
	RETURNING 1)
SELECT count(*) FROM s`
	// sqlConnected says whether user $1 is connected to a live gateway.
	sqlConnected = `SELECT EXISTS (SELECT 1 FROM connections c JOIN presence_gateways g ON g.gateway_id = c.gateway_id
		WHERE c.user_id = $1 AND g.heartbeat_at > now() - $2 * interval '1 millisecond')`
	// sqlMessageState is a message's body and whether it is deleted.
	sqlMessageState = `SELECT m.body, m.deleted FROM messages m WHERE m.conversation_id = $1 AND m.seq = $2`
	// sqlInboxSeqOf is the inbox_seq of user $1's entry of message ($2, $3).
	sqlInboxSeqOf = `SELECT COALESCE((SELECT i.inbox_seq FROM inbox i WHERE i.user_id = $1 AND i.conversation_id = $2 AND i.seq = $3
	AND i.kind = 1 ORDER BY i.inbox_seq DESC LIMIT 1), 0)`
)

// sqlTotalsOf is user $1's totals over this server's conversations.
var sqlTotalsOf = projection.CountsSQL("$1", "")

// notificationsOff returns the members of the conversations of msgs who
// turned notifications off: none on one server, where sqlQueue joins the
// settings itself; on several, the settings are the catalog's.
func (n *Notifier) notificationsOff(ctx context.Context, tx pgx.Tx, msgs []message) ([]int64, error) {
	if !n.sharded() || len(msgs) == 0 {
		return []int64{}, nil
	}
	convs := make([]int64, 0, len(msgs))
	for _, m := range msgs {
		convs = append(convs, m.conv)
	}
	slices.Sort(convs)
	rows, _ := tx.Query(ctx, sqlMembersOf, slices.Compact(convs))
	members, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("members: %w", err)
	}
	rows, _ = n.cfg.Servers.Catalog.Query(ctx, sqlNotificationsOff, members)
	off, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("settings on the catalog: %w", err)
	}
	if off == nil {
		off = []int64{}
	}
	return off, nil
}

// sqlBlockersOf are the pairs of users $1 who block users $2.
const sqlBlockersOf = `SELECT blocked_id, blocker_id FROM blocks WHERE blocker_id = ANY($1::bigint[]) AND blocked_id = ANY($2::bigint[])`

// blockersApart returns, by sender of msgs, the members of their
// conversations who block it, read on every server (a member's blocks are
// on its own): none on one server, where sqlQueue reads the blocks itself.
func (n *Notifier) blockersApart(ctx context.Context, tx pgx.Tx, msgs []message) (map[int64][]int64, error) {
	if !n.sharded() || len(msgs) == 0 {
		return nil, nil
	}
	convs := make([]int64, 0, len(msgs))
	senders := make([]int64, 0, len(msgs))
	for _, m := range msgs {
		convs, senders = append(convs, m.conv), append(senders, m.sender)
	}
	slices.Sort(convs)
	rows, _ := tx.Query(ctx, sqlMembersOf, slices.Compact(convs))
	members, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("members: %w", err)
	}
	out := map[int64][]int64{}
	for _, pool := range n.cfg.Servers.All {
		rows, _ := pool.Query(ctx, sqlBlockersOf, members, senders)
		var sender, blocker int64
		if _, err := pgx.ForEachRow(rows, []any{&sender, &blocker}, func() error {
			out[sender] = append(out[sender], blocker)
			return nil
		}); err != nil {
			return nil, fmt.Errorf("blocks of %d members: %w", len(members), err)
		}
	}
	return out, nil
}

// skipConnectedApart is skipConnected on one server of several: the due
// notifications' users here, those of them connected on the catalog, and
// their notifications settled here.
func (n *Notifier) skipConnectedApart(ctx context.Context) (int64, error) {
	rows, _ := n.pool.Query(ctx, sqlDueUsers)
	due, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(due) == 0 {
		return 0, err
	}
	rows, _ = n.cfg.Servers.Catalog.Query(ctx, sqlConnectedOf, due, n.cfg.PresenceExpiry.Milliseconds())
	connected, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(connected) == 0 {
		return 0, err
	}
	var skipped int64
	return skipped, n.pool.QueryRow(ctx, sqlSkipUsers, connected).Scan(&skipped)
}

// prepareApart reads what sqlPrepare does, each part on its server.
func (n *Notifier) prepareApart(ctx context.Context, c claimed, w *Webhook) (connected bool, body string, deleted bool, err error) {
	srv := n.cfg.Servers
	if err = srv.Catalog.QueryRow(ctx, sqlConnected, c.user, n.cfg.PresenceExpiry.Milliseconds()).Scan(&connected); err != nil || connected {
		return
	}
	if err = n.pool.QueryRow(ctx, sqlMessageState, c.conv, c.lastSeq).Scan(&body, &deleted); err != nil {
		return
	}
	if err = srv.OfUser(c.user).QueryRow(ctx, sqlInboxSeqOf, c.user, c.conv, c.lastSeq).Scan(&w.InboxSeq); err != nil {
		return
	}
	w.Badge, w.Mentions = 0, 0
	for _, pool := range srv.All {
		var unread, mentions int64
		if err = pool.QueryRow(ctx, sqlTotalsOf, c.user).Scan(&unread, &mentions); err != nil {
			return
		}
		w.Badge += unread
		w.Mentions += mentions
	}
	return
}
