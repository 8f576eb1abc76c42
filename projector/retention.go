package projector

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/projection"
)

// PruneResult counts one retention run.
type PruneResult struct {
	Users   int   // users whose floor moved
	Deleted int64 // inbox rows deleted
}

const (
	sqlPruneUsers = `SELECT id, inbox_floor FROM users WHERE id > $1 AND inbox_seq > inbox_floor ORDER BY id LIMIT $2`
	// The newest entry older than the cutoff; everything up to it goes, so
	// what remains is still contiguous from the new floor (I1).
	sqlPruneTarget = `SELECT max(inbox_seq) FROM inbox WHERE user_id = $1 AND inbox_seq > $2 AND created_at < $3`
	sqlPruneLock   = `SELECT inbox_floor FROM users WHERE id = $1 FOR UPDATE`
	sqlPruneDelete = `DELETE FROM inbox WHERE user_id = $1 AND inbox_seq > $2 AND inbox_seq <= $3`
	sqlPruneFloor  = `UPDATE users SET inbox_floor = $2 WHERE id = $1`
)

// Prune deletes inbox entries created before cutoff, in transactions of at
// most batch rows (default 1000) that each lock one user row for a moment,
// and moves each user's floor. Messages are kept. Cursors below the floor
// are answered too long by the gateway. Only one Prune runs at a time
// across processes; a second returns at once with a zero result.
func Prune(ctx context.Context, pool *pgxpool.Pool, cutoff time.Time, batch int) (PruneResult, error) {
	var res PruneResult
	if batch <= 0 {
		batch = 1000
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return res, err
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, projection.LockRetention).Scan(&got); err != nil {
		return res, fmt.Errorf("retention lock: %w", err)
	}
	if !got {
		return res, nil
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, projection.LockRetention) //nolint:errcheck

	var after int64
	for {
		users, err := pruneCandidates(ctx, pool, after)
		if err != nil {
			return res, err
		}
		if len(users) == 0 {
			return res, nil
		}
		for _, u := range users {
			after = u.id
			moved, err := pruneUser(ctx, pool, u, cutoff, batch, &res)
			if err != nil {
				return res, err
			}
			if moved {
				res.Users++
			}
		}
	}
}

// pruneUserRow is a user with entries above its floor.
type pruneUserRow struct{ id, floor int64 }

// pruneCandidates lists the next users after id after with entries above
// their floor.
func pruneCandidates(ctx context.Context, pool *pgxpool.Pool, after int64) ([]pruneUserRow, error) {
	rows, err := pool.Query(ctx, sqlPruneUsers, after, 500)
	if err != nil {
		return nil, fmt.Errorf("list users to prune: %w", err)
	}
	var users []pruneUserRow
	for rows.Next() {
		var u pruneUserRow
		if err := rows.Scan(&u.id, &u.floor); err != nil {
			rows.Close()
			return nil, err
		}
		users = append(users, u)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return users, nil
}

// pruneUser deletes u's entries created before cutoff, batch rows per
// transaction, adding them to res.Deleted; moved says whether its floor
// moved.
func pruneUser(ctx context.Context, pool *pgxpool.Pool, u pruneUserRow, cutoff time.Time, batch int, res *PruneResult) (moved bool, err error) {
	var target *int64
	if err := pool.QueryRow(ctx, sqlPruneTarget, u.id, u.floor, cutoff).Scan(&target); err != nil {
		return false, fmt.Errorf("prune target of user %d: %w", u.id, err)
	}
	if target == nil {
		return false, nil
	}
	for {
		var done bool
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			var floor int64
			if err := tx.QueryRow(ctx, sqlPruneLock, u.id).Scan(&floor); err != nil {
				return err
			}
			if floor >= *target {
				done = true
				return nil
			}
			upto := min(*target, floor+int64(batch))
			tag, err := tx.Exec(ctx, sqlPruneDelete, u.id, floor, upto)
			if err != nil {
				return err
			}
			res.Deleted += tag.RowsAffected()
			_, err = tx.Exec(ctx, sqlPruneFloor, u.id, upto)
			return err
		})
		if err != nil {
			return moved, fmt.Errorf("prune user %d: %w", u.id, err)
		}
		if done {
			return moved, nil
		}
		moved = true
	}
}
