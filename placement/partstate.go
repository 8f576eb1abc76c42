package placement

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// partState is a partition's state on a server, as a move copies it: the
// conversations of its partition of the event topic with their rows, the
// users of its partition of the deliveries topic with theirs, both
// topics' offsets for it, the marks of deliveries to it and the counts of
// deliveries from it, and the records of either.
type partState struct {
	cfg    MoveConfig
	convs  []int64
	users  []int64
	msgIDs []string
	tables []tableRows
	recs   tableRows
}

type tableRows struct {
	spec tableSpec
	cols []string
	rows [][]any
}

// tableSpec is a table of a partition's state and the rows of it that
// belong to the partition (where, over args).
type tableSpec struct {
	name  string
	where string
	args  func(st *partState) []any
}

func byConv(st *partState) []any { return []any{st.convs} }
func byUser(st *partState) []any { return []any{st.users} }

// partTables are copied whole (the target holds none of their rows of the
// partition but an earlier attempt's, which the copy deletes first), in
// an order whose deletes and inserts need nothing of each other. The
// settings, presence, API keys, keyed creations and the placement are
// the catalog's for every user and never move; body keys and the
// notifier's state go with their conversations.
var partTables = []tableSpec{
	{"conversations", `id = ANY($1::bigint[])`, byConv},
	{"member_spans", `conversation_id = ANY($1::bigint[])`, byConv},
	{"messages", `conversation_id = ANY($1::bigint[])`, byConv},
	{"conversation_modes", `conversation_id = ANY($1::bigint[])`, byConv},
	{"changes", `conversation_id = ANY($1::bigint[])`, byConv},
	{"reactions", `conversation_id = ANY($1::bigint[])`, byConv},
	{"mentions", `conversation_id = ANY($1::bigint[])`, byConv},
	{"rejections", `conversation_id = ANY($1::bigint[])`, byConv},
	{"reports", `conversation_id = ANY($1::bigint[])`, byConv},
	{"sanctions", `conversation_id = ANY($1::bigint[])`, byConv},
	{"slow_sends", `conversation_id = ANY($1::bigint[])`, byConv},
	{"body_keys", `msg_id = ANY($1::uuid[])`, func(st *partState) []any { return []any{st.msgIDs} }},
	{"uploads", `conversation_id = ANY($1::bigint[])`, byConv},
	{"notifier_convs", `conversation_id = ANY($1::bigint[])`, byConv},
	{"notifications", `conversation_id = ANY($1::bigint[])`, byConv},
	{"users", `id = ANY($1::bigint[])`, byUser},
	{"inbox", `user_id = ANY($1::bigint[])`, byUser},
	{"blocks", `blocker_id = ANY($1::bigint[])`, byUser},
	{"consumer_offsets", `topic = ANY($1::text[]) AND "partition" = $2`, func(st *partState) []any {
		return []any{[]string{st.cfg.Topic, st.cfg.Deliveries}, st.cfg.Partition}
	}},
	{"notifier_offsets", `topic = $1 AND "partition" = $2`, func(st *partState) []any {
		return []any{st.cfg.Topic, st.cfg.Partition}
	}},
	{"delivery_marks", `destination = $1`, func(st *partState) []any { return []any{st.cfg.Partition} }},
	{"delivery_sources", `source_partition = $1`, func(st *partState) []any { return []any{st.cfg.Partition} }},
}

// recordsSpec: a record is of the partition when its user or its
// conversation is; it is merged into the target, which may hold the same
// record for its own user or conversation.
var recordsSpec = tableSpec{"records", `user_id = ANY($1::bigint[]) OR conversation_id = ANY($2::bigint[])`,
	func(st *partState) []any { return []any{st.users, st.convs} }}

// partIDs reads which conversations and users of the server are of the
// partition.
func partIDs(ctx context.Context, q pgx.Tx, cfg MoveConfig) (convs, users []int64, err error) {
	ids := func(sql string, of func(int64, int32) int32) ([]int64, error) {
		rows, _ := q.Query(ctx, sql)
		all, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return nil, err
		}
		out := []int64{}
		for _, id := range all {
			if of(id, cfg.Partitions) == cfg.Partition {
				out = append(out, id)
			}
		}
		return out, nil
	}
	if convs, err = ids(`SELECT id FROM conversations UNION SELECT conversation_id FROM rejections`, OfConversation); err != nil {
		return nil, nil, fmt.Errorf("conversations: %w", err)
	}
	// A blocker may have no users row yet (nothing in its inbox): its
	// blocks are of its partition all the same.
	if users, err = ids(`SELECT id FROM users UNION SELECT blocker_id FROM blocks`, OfUser); err != nil {
		return nil, nil, fmt.Errorf("users: %w", err)
	}
	return convs, users, nil
}

// readPartition reads the partition's state from src in one snapshot.
func readPartition(ctx context.Context, src *pgxpool.Pool, cfg MoveConfig) (*partState, error) {
	st := &partState{cfg: cfg}
	err := pgx.BeginTxFunc(ctx, src, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if st.convs, st.users, err = partIDs(ctx, tx, cfg); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, `SELECT msg_id::text FROM messages WHERE conversation_id = ANY($1::bigint[])`, st.convs)
		if st.msgIDs, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return fmt.Errorf("msg ids: %w", err)
		}
		if st.msgIDs == nil {
			st.msgIDs = []string{}
		}
		for _, spec := range partTables {
			tr, err := readRows(ctx, tx, spec, st)
			if err != nil {
				return err
			}
			st.tables = append(st.tables, tr)
		}
		st.recs, err = readRows(ctx, tx, recordsSpec, st)
		return err
	})
	return st, err
}

func readRows(ctx context.Context, tx pgx.Tx, spec tableSpec, st *partState) (tableRows, error) {
	tr := tableRows{spec: spec}
	cols, err := StoredColumns(ctx, tx, spec.name)
	if err != nil {
		return tr, err
	}
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE %s`, cols, pgx.Identifier{spec.name}.Sanitize(), spec.where), spec.args(st)...)
	if err != nil {
		return tr, fmt.Errorf("%s: %w", spec.name, err)
	}
	defer rows.Close()
	for _, f := range rows.FieldDescriptions() {
		tr.cols = append(tr.cols, f.Name)
	}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return tr, fmt.Errorf("%s: %w", spec.name, err)
		}
		tr.rows = append(tr.rows, vals)
	}
	if err := rows.Err(); err != nil {
		return tr, fmt.Errorf("%s: %w", spec.name, err)
	}
	return tr, nil
}

func (st *partState) rows() int64 {
	n := int64(len(st.recs.rows))
	for _, t := range st.tables {
		n += int64(len(t.rows))
	}
	return n
}

// sqlMergeRecords merges the copied records into the target's: state is
// the same in every copy of a record, the version is the user's server's
// (the partition's users' records come from their old server), the armed
// flag the conversation's.
const sqlMergeRecords = `INSERT INTO records SELECT * FROM moved_records
ON CONFLICT (user_id, conversation_id) DO UPDATE SET pinned = excluded.pinned, muted = excluded.muted,
  read_seq = excluded.read_seq, removed = excluded.removed,
  version = CASE WHEN excluded.user_id = ANY($1::bigint[]) THEN excluded.version ELSE records.version END,
  armed = CASE WHEN excluded.conversation_id = ANY($2::bigint[]) THEN excluded.armed ELSE records.armed END`

// write copies st into dst in one transaction, first deleting what an
// earlier attempt copied.
func (st *partState) write(ctx context.Context, dst *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, dst, func(tx pgx.Tx) error {
		for _, t := range st.tables {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE %s`, pgx.Identifier{t.spec.name}.Sanitize(), t.spec.where),
				t.spec.args(st)...); err != nil {
				return fmt.Errorf("clear %s: %w", t.spec.name, err)
			}
			if len(t.rows) == 0 {
				continue
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{t.spec.name}, t.cols, pgx.CopyFromRows(t.rows)); err != nil {
				return fmt.Errorf("copy %s: %w", t.spec.name, err)
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE moved_records (LIKE records) ON COMMIT DROP`); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"moved_records"}, st.recs.cols, pgx.CopyFromRows(st.recs.rows)); err != nil {
			return fmt.Errorf("copy records: %w", err)
		}
		if _, err := tx.Exec(ctx, sqlMergeRecords, st.users, st.convs); err != nil {
			return fmt.Errorf("merge records: %w", err)
		}
		return nil
	})
}

// cleanSource removes from src, in one transaction, what it no longer
// holds once the partition is on its target (after): the partition's
// rows, and the records whose user and conversation are both elsewhere.
func cleanSource(ctx context.Context, src *pgxpool.Pool, cfg MoveConfig, after *Map, server int32) error {
	return pgx.BeginFunc(ctx, src, func(tx pgx.Tx) error {
		st := &partState{cfg: cfg}
		var err error
		if st.convs, st.users, err = partIDs(ctx, tx, cfg); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, `SELECT msg_id::text FROM messages WHERE conversation_id = ANY($1::bigint[])`, st.convs)
		if st.msgIDs, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		if st.msgIDs == nil {
			st.msgIDs = []string{}
		}
		return st.removeOn(ctx, tx, func(u, c int64) bool {
			return after.Server(OfUser(u, cfg.Partitions)) == server || after.Server(OfConversation(c, cfg.Partitions)) == server
		})
	})
}

// remove takes back from dst, under placement m (the partition still on
// its source), what an interrupted copy left there.
func (st *partState) remove(ctx context.Context, dst *pgxpool.Pool, m *Map, server int32) error {
	n := st.cfg.Partitions
	return pgx.BeginFunc(ctx, dst, func(tx pgx.Tx) error {
		return st.removeOn(ctx, tx, func(u, c int64) bool {
			return m.Server(OfUser(u, n)) == server || m.Server(OfConversation(c, n)) == server
		})
	})
}

// removeOn deletes st's tables' rows of the partition and the records of
// it that keep does not keep.
func (st *partState) removeOn(ctx context.Context, tx pgx.Tx, keep func(user, conv int64) bool) error {
	for i := len(partTables) - 1; i >= 0; i-- {
		spec := partTables[i]
		if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE %s`, pgx.Identifier{spec.name}.Sanitize(), spec.where),
			spec.args(st)...); err != nil {
			return fmt.Errorf("delete %s: %w", spec.name, err)
		}
	}
	rows, _ := tx.Query(ctx, `SELECT user_id, conversation_id FROM records WHERE `+recordsSpec.where, recordsSpec.args(st)...)
	pairs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]int64, error) {
		var p [2]int64
		return p, r.Scan(&p[0], &p[1])
	})
	if err != nil {
		return fmt.Errorf("records: %w", err)
	}
	var us, cs []int64
	for _, p := range pairs {
		if !keep(p[0], p[1]) {
			us, cs = append(us, p[0]), append(cs, p[1])
		}
	}
	if len(us) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM records r USING unnest($1::bigint[], $2::bigint[]) AS k(u, c)
WHERE r.user_id = k.u AND r.conversation_id = k.c`, us, cs); err != nil {
			return fmt.Errorf("delete records: %w", err)
		}
	}
	return nil
}

// StoredColumns lists the columns of table that a copy writes, quoted and
// comma-separated: all but the generated ones (the search index of
// messages), which the target computes itself and refuses to be given.
func StoredColumns(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, table string) (string, error) {
	var cols string
	err := q.QueryRow(ctx, `SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''`, table).Scan(&cols)
	if err != nil {
		return "", fmt.Errorf("the columns of %s: %w", table, err)
	}
	return cols, nil
}
