package importer

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/projector"
)

// history is the shape of a generated import file.
type history struct {
	convs, msgsPerConv int
	members            int // members per conversation at creation; one more joins halfway
}

// base is the first original time of generated files: long before the
// import, as real history is.
var base = time.Date(2021, 3, 1, 9, 0, 0, 0, time.UTC)

// msgTime is the original time of message j of conversation i.
func msgTime(i, j int) time.Time {
	return base.Add(time.Duration(j)*time.Minute + time.Duration(i)*time.Millisecond)
}

// user is the k-th member of conversation i: users are shared between
// conversations, so inboxes hold several.
func user(i, k int) int64 { return int64(1 + (i*7+k*13)%500) }

// writeHistory writes h as an import file, the conversations' lines
// interleaved in time order as an export of a whole system would be, and
// returns its path.
func writeHistory(t testing.TB, h history) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "history.ndjson")
	f, err := os.Create(path)
	require.NoError(t, err)
	w := bufio.NewWriterSize(f, 1<<20)
	enc := json.NewEncoder(w)
	line := func(v any) { require.NoError(t, enc.Encode(v)) }
	for i := 0; i < h.convs; i++ {
		members := make([]int64, h.members)
		for k := range members {
			members[k] = user(i, k)
		}
		line(map[string]any{"kind": "conversation", "id": convExt(i), "title": fmt.Sprintf("room %d", i),
			"members": members, "created_at": base.Add(time.Duration(i) * time.Millisecond)})
	}
	for j := 1; j <= h.msgsPerConv; j++ {
		for i := 0; i < h.convs; i++ {
			if j == h.msgsPerConv/2 {
				line(map[string]any{"kind": "member", "conversation": convExt(i), "user_id": user(i, h.members),
					"joined_at": msgTime(i, j).Add(-time.Second)})
			}
			line(map[string]any{"kind": "message", "conversation": convExt(i), "id": "m" + strconv.Itoa(j),
				"sender": user(i, j%h.members), "body": body(i, j), "sent_at": msgTime(i, j)})
		}
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())
	return path
}

func convExt(i int) string { return "room-" + strconv.Itoa(i) }
func body(i, j int) string { return fmt.Sprintf("message %d of room %d", j, i) }

// snapshot is the row counts and checksums of the projections.
type snapshot map[string]tableSum

// tableSum is one table's row count and the md5 of its rows in order.
type tableSum struct {
	Rows int64
	MD5  string
}

// snapshotTables are the projection tables compared before and after a
// second run, each read in a total order.
var snapshotTables = map[string]string{
	"conversations":        `SELECT * FROM conversations ORDER BY id`,
	"messages":             `SELECT * FROM messages ORDER BY conversation_id, seq`,
	"inbox":                `SELECT * FROM inbox ORDER BY user_id, inbox_seq`,
	"users":                `SELECT * FROM users ORDER BY id`,
	"records":              `SELECT * FROM records ORDER BY user_id, conversation_id`,
	"member_spans":         `SELECT * FROM member_spans ORDER BY conversation_id, user_id, joined_seq`,
	"rejections":           `SELECT * FROM rejections ORDER BY event_id`,
	"import_conversations": `SELECT * FROM import_conversations ORDER BY source, external_id`,
}

func takeSnapshot(t testing.TB, pool *pgxpool.Pool) snapshot {
	t.Helper()
	s := snapshot{}
	for name, q := range snapshotTables {
		var n int64
		var sum string
		err := pool.QueryRow(context.Background(),
			`SELECT count(*), coalesce(md5(string_agg(x::text, E'\n')), '') FROM (`+q+`) x`).Scan(&n, &sum)
		require.NoError(t, err, name)
		s[name] = tableSum{Rows: n, MD5: sum}
	}
	return s
}

// verify checks invariants I1-I8 (and the others of inboxd verify).
func verify(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	rep, err := projector.Verify(context.Background(), pool)
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
}

// count runs a count query.
func count(t testing.TB, pool *pgxpool.Pool, q string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), q, args...).Scan(&n), q)
	return n
}
