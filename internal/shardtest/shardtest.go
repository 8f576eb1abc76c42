// Package shardtest checks a sharded projection as a whole: it copies the
// servers' databases into one, each conversation's state from its server
// and each user's from its own, so that projector.Verify (and any check
// written for one server) reads the deployment as if it were one. World
// (world.go) is a randomized log projected on one server and, through the
// two stages with the copies and redeliveries of a crashing relay, on two,
// for the tests that compare a sharded read or projection with one
// server's.
package shardtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/placement"
)

// Servers is a deployment under test: its databases by server (index 0 is
// server 1), the placement and the partition count.
type Servers struct {
	Pools      []*pgxpool.Pool
	Map        *placement.Map
	Partitions int32
	Topic      string // the event topic, whose offsets are copied
}

// ServerOf is the index in Pools of the server holding partition p.
func (s Servers) ServerOf(p int32) int { return int(s.Map.Server(p)) - 1 }

// ConvOn says whether conversation c's state is on server index i.
func (s Servers) ConvOn(i int, c int64) bool {
	return s.ServerOf(placement.OfConversation(c, s.Partitions)) == i
}

// UserOn says whether user u's state is on server index i.
func (s Servers) UserOn(i int, u int64) bool {
	return s.ServerOf(placement.OfUser(u, s.Partitions)) == i
}

// convTables hold per-conversation state, each keyed by its column.
var convTables = map[string]string{
	"conversations": "id", "member_spans": "conversation_id", "messages": "conversation_id",
	"conversation_modes": "conversation_id", "changes": "conversation_id", "reactions": "conversation_id",
	"mentions": "conversation_id", "rejections": "conversation_id", "reports": "conversation_id",
}

// Union copies the servers into a fresh database: conversation state from
// the conversations' servers, the event topic's offsets from the
// partitions' servers, users, inboxes and records from the users' servers
// (records' armed flags, which are rule state, from the conversations').
func (s Servers) Union(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	u, _ := pgtest.NewPool(t)
	for i, pool := range s.Pools {
		for table, col := range convTables {
			CopyRows(t, ctx, pool, u, table, func(row map[string]any) bool { return s.ConvOn(i, toInt64(row[col])) })
		}
		CopyRows(t, ctx, pool, u, "consumer_offsets", func(row map[string]any) bool {
			return row["topic"] == s.Topic && s.ServerOf(int32(toInt64(row["partition"]))) == i
		})
		CopyRows(t, ctx, pool, u, "users", func(row map[string]any) bool { return s.UserOn(i, toInt64(row["id"])) })
		CopyRows(t, ctx, pool, u, "inbox", func(row map[string]any) bool { return s.UserOn(i, toInt64(row["user_id"])) })
		CopyRows(t, ctx, pool, u, "records", func(row map[string]any) bool { return s.UserOn(i, toInt64(row["user_id"])) })
		CopyRows(t, ctx, pool, u, "blocks", func(row map[string]any) bool { return s.UserOn(i, toInt64(row["blocker_id"])) })
	}
	for i, pool := range s.Pools {
		rows, err := pool.Query(ctx, `SELECT user_id, conversation_id FROM records WHERE armed`)
		require.NoError(t, err)
		var us, cs []int64
		for rows.Next() {
			var usr, c int64
			require.NoError(t, rows.Scan(&usr, &c))
			if s.ConvOn(i, c) {
				us, cs = append(us, usr), append(cs, c)
			}
		}
		require.NoError(t, rows.Err())
		_, err = u.Exec(ctx, `UPDATE records r SET armed = true FROM unnest($1::bigint[], $2::bigint[]) AS k(u, c)
WHERE r.user_id = k.u AND r.conversation_id = k.c`, us, cs)
		require.NoError(t, err)
	}
	return u
}

// CopyRows copies the rows of table that keep accepts from src to dst.
func CopyRows(t testing.TB, ctx context.Context, src, dst *pgxpool.Pool, table string, keep func(map[string]any) bool) {
	t.Helper()
	stored, err := placement.StoredColumns(ctx, src, table)
	require.NoError(t, err)
	rows, err := src.Query(ctx, fmt.Sprintf(`SELECT %s FROM %s`, stored, pgx.Identifier{table}.Sanitize()))
	require.NoError(t, err)
	var cols []string
	for _, f := range rows.FieldDescriptions() {
		cols = append(cols, f.Name)
	}
	var out [][]any
	for rows.Next() {
		vals, err := rows.Values()
		require.NoError(t, err)
		row := map[string]any{}
		for i, c := range cols {
			row[c] = vals[i]
		}
		if keep(row) {
			out = append(out, vals)
		}
	}
	require.NoError(t, rows.Err())
	_, err = dst.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(out))
	require.NoError(t, err, "copy %s", table)
}

func toInt64(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int32:
		return int64(x)
	case int16:
		return int64(x)
	}
	panic(fmt.Sprintf("not an integer: %T", v))
}
