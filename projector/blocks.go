package projector

import (
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/events"
)

// Blocks between users (docs/protocol.md, "Blocks"): user.blocked and
// user.unblocked are user-level events, keyed by the blocker, so they are
// projected by the stage that owns the blocker's partition, on the
// blocker's server. They touch no conversation, no inbox and no head: the
// batch keeps each pair's end state and writes it back with set-based
// statements.
//
// A pair's row keeps the time of the user.blocked that set it: blocking
// again changes nothing, and a block after an unblock sets the time
// anew. A batch writes that without reading the table (an unblock seen in
// the batch deletes the row before the insert), so any cut of the log
// into batches, live or in a replay, writes the same row.

// blockKey is a (blocker, blocked) pair.
type blockKey struct{ blocker, blocked int64 }

// blockState is a pair's state after the batch's events: blocked since
// at, or not blocked; reset says the batch unblocked it at some point,
// so a stored row of it is deleted first.
type blockState struct {
	blocked, reset bool
	at             time.Time
}

const (
	sqlDeleteBlocks = `DELETE FROM blocks b USING unnest($1::bigint[], $2::bigint[]) AS k(a, o)
WHERE b.blocker_id = k.a AND b.blocked_id = k.o`
	// sqlInsertBlocks keeps a stored row: blocking twice changes nothing.
	sqlInsertBlocks = `INSERT INTO blocks (blocker_id, blocked_id, at)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[]) ORDER BY 1, 2
ON CONFLICT (blocker_id, blocked_id) DO NOTHING`
)

// userBlock applies a user.blocked or user.unblocked.
func (b *batch) userBlock(e *events.Event) {
	k := blockKey{e.ActorID, e.UserID}
	s := b.blocks[k]
	if s == nil {
		s = &blockState{}
		b.blocks[k] = s
	}
	switch e.Type {
	case events.UserBlocked:
		if !s.blocked {
			s.blocked, s.at = true, e.At
		}
	case events.UserUnblocked:
		s.blocked, s.reset, s.at = false, true, time.Time{}
	}
}

// queueBlocks queues the writes of the batch's blocks, in key order.
func (t *txn) queueBlocks(bt *pgx.Batch) {
	if len(t.b.blocks) == 0 {
		return
	}
	keys := make([]blockKey, 0, len(t.b.blocks))
	for k := range t.b.blocks {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].blocker < keys[j].blocker || keys[i].blocker == keys[j].blocker && keys[i].blocked < keys[j].blocked
	})
	var da, do, ia, io []int64
	var at []time.Time
	for _, k := range keys {
		s := t.b.blocks[k]
		if s.reset {
			da, do = append(da, k.blocker), append(do, k.blocked)
		}
		if s.blocked {
			ia, io, at = append(ia, k.blocker), append(io, k.blocked), append(at, s.at)
		}
	}
	if len(da) > 0 {
		bt.Queue(sqlDeleteBlocks, da, do)
	}
	if len(ia) > 0 {
		bt.Queue(sqlInsertBlocks, ia, io, at)
	}
}
