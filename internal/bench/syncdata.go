package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// syncData is a projection generated directly with COPY, consistent with
// the schema and invariants I1-I8 as if the fanout had projected it:
// Users users and as many conversations of Members members each, every
// user in Members conversations; each conversation has its creation (a
// system message, and a record entry per member) and then Messages text
// messages. Every inbox holds Head entries.
type syncData struct {
	Users    int   `json:"users"`
	Members  int   `json:"members"`
	Messages int   `json:"messages_per_conversation"`
	Head     int64 `json:"head"` // inbox entries of every user
	Epoch    int64 `json:"epoch"`
	Rows     int64 `json:"inbox_rows"`
}

// memberOf returns the members of conversation c (0-based) and, by
// symmetry, which conversations a user is in: member k of c is user
// (c + k*stride) mod users + 1.
func (d syncData) membersOf(c int) []int64 {
	stride := d.Users / d.Members
	out := make([]int64, d.Members)
	for k := range out {
		out[k] = int64((c+k*stride)%d.Users) + 1
	}
	return out
}

func (d syncData) conversationsOf(u int64) []int {
	stride := d.Users / d.Members
	out := make([]int, d.Members)
	for k := range out {
		out[k] = ((int(u-1)-k*stride)%d.Users + d.Users) % d.Users
	}
	slices.Sort(out)
	return out
}

// generateSyncData fills the (migrated, empty) database of pool.
func generateSyncData(ctx context.Context, pool *pgxpool.Pool, users, members, messages int, progress io.Writer) (syncData, error) {
	if users < members*2 {
		users = members * 2
	}
	d := syncData{Users: users, Members: members, Messages: messages}
	d.Head = int64(2*members + messages*members)
	d.Rows = d.Head * int64(users)
	if err := pool.QueryRow(ctx, `SELECT epoch FROM meta`).Scan(&d.Epoch); err != nil {
		return d, err
	}
	at := time.Now().Add(-time.Hour).UTC()
	lastSeq := int64(messages + 1)

	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		// conversations, member spans and messages, by conversation.
		c := 0
		// The creator (the first member) owns each (docs/protocol.md, "Roles").
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"conversations"}, []string{"id", "title", "created_by", "owner_id", "created_at", "last_seq", "last_at", "text_count", "member_count"},
			pgx.CopyFromFunc(func() ([]any, error) {
				if c == users {
					return nil, nil
				}
				c++
				creator := d.membersOf(c - 1)[0]
				return []any{int64(c), fmt.Sprintf("conversation %d", c), creator, creator, at, lastSeq, at, lastSeq - 1, int64(members)}, nil
			}))
		if err != nil {
			return fmt.Errorf("copy conversations: %w", err)
		}
		// Each in write mode from its first seq, as a creation below the
		// read fan-out threshold records it (docs/large-conversations.md).
		if _, err := tx.Exec(ctx, `INSERT INTO conversation_modes (conversation_id, from_seq, read_fanout) SELECT id, 1, false FROM conversations`); err != nil {
			return fmt.Errorf("conversation modes: %w", err)
		}
		c, k := 0, 0
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"member_spans"}, []string{"conversation_id", "user_id", "joined_seq", "role"},
			pgx.CopyFromFunc(func() ([]any, error) {
				if k == members {
					c, k = c+1, 0
				}
				if c == users {
					return nil, nil
				}
				k++
				role := "member"
				if k == 1 {
					role = "owner"
				}
				return []any{int64(c + 1), d.membersOf(c)[k-1], int64(1), role}, nil
			}))
		if err != nil {
			return fmt.Errorf("copy member_spans: %w", err)
		}
		c, seq := 0, int64(0)
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"messages"}, []string{"conversation_id", "seq", "msg_id", "sender_id", "kind", "body", "created_at", "ord"},
			pgx.CopyFromFunc(func() ([]any, error) {
				if seq == lastSeq {
					c, seq = c+1, 0
				}
				if c == users {
					return nil, nil
				}
				seq++
				m := d.membersOf(c)
				if seq == 1 {
					body, _ := json.Marshal(map[string]any{"event": "conversation.created", "by": m[0],
						"title": fmt.Sprintf("conversation %d", c+1), "members": m})
					return []any{int64(c + 1), seq, uuid.New(), m[0], "system", string(body), at, int64(0)}, nil
				}
				return []any{int64(c + 1), seq, uuid.New(), m[int(seq)%members], "text",
					fmt.Sprintf("message %d of conversation %d, forty-odd bytes", seq, c+1), at, seq - 1}, nil
			}))
		if err != nil {
			return fmt.Errorf("copy messages: %w", err)
		}
		progressf(progress, "bench sync: %d conversations and %d messages copied", users, int64(users)*lastSeq)

		// users, records and inbox, by user: each inbox in the order the
		// projector would have written it (creations by conversation id,
		// then message rounds), so that COPY appends to the primary key.
		u := int64(0)
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"users"}, []string{"id", "inbox_seq", "inbox_floor", "record_version"},
			pgx.CopyFromFunc(func() ([]any, error) {
				if u == int64(users) {
					return nil, nil
				}
				u++
				return []any{u, d.Head, int64(0), int64(members)}, nil
			}))
		if err != nil {
			return fmt.Errorf("copy users: %w", err)
		}
		u, k = 1, 0
		convs := d.conversationsOf(1)
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"records"}, []string{"user_id", "conversation_id", "read_seq", "version"},
			pgx.CopyFromFunc(func() ([]any, error) {
				if k == members {
					u, k = u+1, 0
					convs = d.conversationsOf(u)
				}
				if u > int64(users) {
					return nil, nil
				}
				k++
				return []any{u, int64(convs[k-1] + 1), int64(0), int64(k)}, nil
			}))
		if err != nil {
			return fmt.Errorf("copy records: %w", err)
		}
		// Read positions as the projector moves them: to the join, and past
		// each member's own messages.
		if _, err := tx.Exec(ctx, `WITH own AS (SELECT conversation_id, sender_id, max(seq) AS s FROM messages
			WHERE kind = 'text' GROUP BY conversation_id, sender_id)
			UPDATE records r SET read_seq = greatest(1, COALESCE(own.s, 0))
			FROM records r2 LEFT JOIN own ON own.conversation_id = r2.conversation_id AND own.sender_id = r2.user_id
			WHERE r.user_id = r2.user_id AND r.conversation_id = r2.conversation_id`); err != nil {
			return fmt.Errorf("read positions: %w", err)
		}
		var rows []inboxRow
		u = 0
		next := 0
		copied := int64(0)
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"inbox"}, []string{"user_id", "inbox_seq", "conversation_id", "kind", "seq", "version", "created_at"},
			pgx.CopyFromFunc(func() ([]any, error) {
				if next == len(rows) {
					if u == int64(users) {
						return nil, nil
					}
					u++
					rows = d.inboxOf(u, rows[:0])
					next = 0
				}
				r := rows[next]
				next++
				copied++
				if copied%250000 == 0 {
					progressf(progress, "bench sync: %d/%d inbox rows copied", copied, d.Rows)
				}
				return []any{u, r.inboxSeq, r.conv, r.kind, r.seq, r.version, at}, nil
			}))
		if err != nil {
			return fmt.Errorf("copy inbox: %w", err)
		}
		return nil
	})
	if err != nil {
		return d, err
	}
	if _, err := pool.Exec(ctx, `ANALYZE`); err != nil {
		return d, err
	}
	return d, nil
}

type inboxRow struct {
	inboxSeq, conv int64
	kind           int16
	seq, version   int64
}

// inboxOf is user u's inbox, in order.
func (d syncData) inboxOf(u int64, rows []inboxRow) []inboxRow {
	convs := d.conversationsOf(u)
	n := int64(0)
	for v, c := range convs {
		n++
		rows = append(rows, inboxRow{inboxSeq: n, conv: int64(c + 1), kind: 1, seq: 1})
		n++
		rows = append(rows, inboxRow{inboxSeq: n, conv: int64(c + 1), kind: 2, version: int64(v + 1)})
	}
	for s := int64(2); s <= int64(d.Messages+1); s++ {
		for _, c := range convs {
			n++
			rows = append(rows, inboxRow{inboxSeq: n, conv: int64(c + 1), kind: 1, seq: s})
		}
	}
	return rows
}
