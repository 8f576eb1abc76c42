package notifier

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Queuing: once the fanout has projected a poll's records, their messages
// become notifications in one transaction with the notifier's offsets.

// sqlEnsureOffset and sqlLockOffset keep a partition's progress; the lock
// fences a second notifier that still believes it owns the partition.
const (
	sqlEnsureOffset = `INSERT INTO notifier_offsets (topic, "partition", next_offset) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`
	sqlLockOffset   = `SELECT next_offset FROM notifier_offsets WHERE topic = $1 AND "partition" = $2 FOR UPDATE`
	sqlSaveOffset   = `UPDATE notifier_offsets SET next_offset = $3, updated_at = now() WHERE topic = $1 AND "partition" = $2`
)

// sqlMessages are the projected text messages of the records' msg_ids,
// in conversation order, after the last one queued per conversation (a
// record seen twice, or a send the projection refused, yields nothing).
const sqlMessages = `SELECT m.conversation_id, m.seq, m.sender_id, m.created_at, COALESCE(m.mentions, '{}'), m.mention_all
FROM messages m LEFT JOIN notifier_convs nc ON nc.conversation_id = m.conversation_id
WHERE m.msg_id = ANY($1::uuid[]) AND m.kind = 'text' AND m.seq > COALESCE(nc.last_seq, 0)
ORDER BY m.conversation_id, m.seq`

const sqlSaveConv = `INSERT INTO notifier_convs (conversation_id, last_seq) VALUES ($1, $2)
ON CONFLICT (conversation_id) DO UPDATE SET last_seq = GREATEST(notifier_convs.last_seq, EXCLUDED.last_seq)`

// sqlQueue queues the notifications of one message ($1 conversation, $2
// seq, $3 sender, $4 mentioned ids, $5 @all, $6 its time, $7 the delay in
// ms, $8 members with notifications off by the catalog's settings, on a
// server of several, $9 members who block the sender, read on their
// servers when those are others): one per member who could see it, but
// the sender, members with notifications off, members who block the
// sender (docs/protocol.md, "Blocks"), and members who muted the
// conversation unless it mentions them. A member's open burst in the conversation takes it in.
// Each row returned is a new burst (true) or a join (false).
const sqlQueue = `INSERT INTO notifications (id, user_id, conversation_id, first_seq, last_seq, sender_id, mention, committed_at, due_at)
SELECT gen_random_uuid(), s.user_id, $1, $2, $2, $3, s.user_id = ANY($4::bigint[]) OR $5, $6,
	$6::timestamptz + $7 * interval '1 millisecond'
FROM member_spans s
LEFT JOIN records r ON r.user_id = s.user_id AND r.conversation_id = s.conversation_id
LEFT JOIN user_settings us ON us.user_id = s.user_id
WHERE s.conversation_id = $1 AND s.joined_seq <= $2 AND (s.left_seq IS NULL OR s.left_seq >= $2) AND s.user_id <> $3
	AND COALESCE(us.notifications, true) AND NOT s.user_id = ANY($8::bigint[])
	AND NOT s.user_id = ANY($9::bigint[])
	AND NOT EXISTS (SELECT 1 FROM blocks b WHERE b.blocker_id = s.user_id AND b.blocked_id = $3)
	AND (NOT COALESCE(r.muted, false) OR s.user_id = ANY($4::bigint[]) OR $5)
ON CONFLICT (user_id, conversation_id) WHERE state = 'pending' AND attempts = 0 AND kind = 'message' DO UPDATE SET
	last_seq = GREATEST(notifications.last_seq, EXCLUDED.last_seq), count = notifications.count + 1,
	sender_id = EXCLUDED.sender_id, mention = notifications.mention OR EXCLUDED.mention
RETURNING xmax = 0`

// message is a projected message to queue notifications for.
type message struct {
	conv, seq, sender int64
	at                time.Time
	mentions          []int64
	all               bool
}

// sqlQueueReports queues one notification of kind report per report the
// projection kept from the events $1 (a report refused, or a repeated
// report id, kept none), due at once: a report is no member's message and
// is never skipped. Its id is the report's, so it is queued once however
// often its record is read.
const sqlQueueReports = `INSERT INTO notifications (id, kind, report_id, user_id, conversation_id, first_seq, last_seq, sender_id,
	committed_at, due_at)
SELECT r.id, 'report', r.id, r.reporter_id, r.conversation_id, r.seq, r.seq, r.sender_id, now(), now()
FROM reports r WHERE r.event_id = ANY($1::uuid[])
ON CONFLICT (id) DO NOTHING`

// queue queues the notifications of the messages of msgIDs and of the
// reports of the message.reported events reports (records of partition p
// below next, whose stored offset must be from) and stores next, in one
// transaction. It returns false when the stored offset is no longer from:
// another notifier took the partition and went on.
func (n *Notifier) queue(ctx context.Context, p int32, from, next int64, msgIDs, reports []string) (bool, error) {
	var queued, joined int
	fenced := false
	err := pgx.BeginTxFunc(ctx, n.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		queued, joined = 0, 0
		if _, err := tx.Exec(ctx, sqlEnsureOffset, n.cfg.Topic, p, from); err != nil {
			return err
		}
		var stored int64
		if err := tx.QueryRow(ctx, sqlLockOffset, n.cfg.Topic, p).Scan(&stored); err != nil {
			return err
		}
		if stored != from {
			fenced = true
			return nil
		}
		msgs, err := loadMessages(ctx, tx, msgIDs)
		if err != nil {
			return err
		}
		drop := n.pendingNow.Load() >= int64(n.cfg.MaxPending)
		off, err := n.notificationsOff(ctx, tx, msgs)
		if err != nil {
			return err
		}
		blockers, err := n.blockersApart(ctx, tx, msgs)
		if err != nil {
			return err
		}
		if queued, joined, err = n.queueMessages(ctx, tx, msgs, off, blockers, drop); err != nil {
			return err
		}
		if len(reports) > 0 && !drop {
			tag, err := tx.Exec(ctx, sqlQueueReports, reports)
			if err != nil {
				return fmt.Errorf("queue reports: %w", err)
			}
			queued += int(tag.RowsAffected())
		}
		_, err = tx.Exec(ctx, sqlSaveOffset, n.cfg.Topic, p, next)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("queue the notifications of partition %d at %d: %w", p, from, err)
	}
	n.m.outcomes.WithLabelValues(OutcomeQueued).Add(float64(queued))
	n.m.outcomes.WithLabelValues(OutcomeJoined).Add(float64(joined))
	return !fenced, nil
}

// loadMessages reads the messages to queue.
func loadMessages(ctx context.Context, tx pgx.Tx, msgIDs []string) ([]message, error) {
	if len(msgIDs) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, sqlMessages, msgIDs)
	if err != nil {
		return nil, err
	}
	var out []message
	var m message
	_, err = pgx.ForEachRow(rows, []any{&m.conv, &m.seq, &m.sender, &m.at, &m.mentions, &m.all}, func() error {
		out = append(out, m)
		m.mentions = nil
		return nil
	})
	return out, err
}

// queueMessages queues msgs (in conversation order) in one pipeline and
// moves each conversation's last queued seq; with drop, nothing is queued
// (MaxPending) but the messages count as handled.
func (n *Notifier) queueMessages(ctx context.Context, tx pgx.Tx, msgs []message, off []int64, blockers map[int64][]int64, drop bool) (queued, joined int, err error) {
	if len(msgs) == 0 {
		return 0, 0, nil
	}
	b := &pgx.Batch{}
	last := map[int64]int64{}
	for _, m := range msgs {
		last[m.conv] = max(last[m.conv], m.seq)
		if drop {
			n.m.outcomes.WithLabelValues(OutcomeDropped).Inc()
			continue
		}
		bl := blockers[m.sender]
		if bl == nil {
			bl = []int64{}
		}
		b.Queue(sqlQueue, m.conv, m.seq, m.sender, m.mentions, m.all, m.at, n.cfg.Delay.Milliseconds(), off, bl).Query(func(rows pgx.Rows) error {
			var isNew bool
			_, err := pgx.ForEachRow(rows, []any{&isNew}, func() error {
				if isNew {
					queued++
				} else {
					joined++
				}
				return nil
			})
			return err
		})
	}
	for c, s := range last {
		b.Queue(sqlSaveConv, c, s)
	}
	return queued, joined, tx.SendBatch(ctx, b).Close()
}
