package importer

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
)

// EnvImportMessages sets the messages of TestImportTwice (1,000
// conversations; default 100,000, the acceptance size).
const EnvImportMessages = "INBOXD_TEST_IMPORT_MESSAGES"

// TestImportTwice imports a history of 1,000 conversations twice: the
// second run (from its checkpoint, and again with --restart, every event
// appended anew) changes nothing; histories are complete, in order, with
// their original times; inboxes hold no imported message; nothing is
// unread; the invariants hold.
func TestImportTwice(t *testing.T) {
	total := 100000
	if v := os.Getenv(EnvImportMessages); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, EnvImportMessages)
		total = n
	}
	h := history{convs: 1000, msgsPerConv: max(2, total/1000), members: 4}
	path := writeHistory(t, h)
	env := testenv.New(t, testenv.Options{Partitions: 4})
	env.StartFanout(t)
	ctx := context.Background()
	cfg := Config{File: path, Source: "oldchat", Wait: true, Logger: env.Logger}

	res, err := Run(ctx, cfg, env.Pool, env.Producer)
	require.NoError(t, err)
	msgs := int64(h.convs * h.msgsPerConv)
	require.Equal(t, msgs, res.Messages)
	require.Equal(t, int64(h.convs), res.Conversations)
	t.Logf("imported %d messages in %d conversations: appended in %s, projected after %s: %.0f messages/s end to end",
		res.Messages, res.Conversations, res.Append.Round(time.Millisecond), res.Total.Round(time.Millisecond), res.Rate())
	verify(t, env.Pool)
	checkImported(t, env, h)
	before := takeSnapshot(t, env.Pool)

	// From the checkpoint: nothing to append.
	again, err := Run(ctx, cfg, env.Pool, env.Producer)
	require.NoError(t, err)
	require.Zero(t, again.Appended)
	require.Equal(t, before, takeSnapshot(t, env.Pool))

	// Every event appended again: each is projected at most once.
	cfg.Restart = true
	again, err = Run(ctx, cfg, env.Pool, env.Producer)
	require.NoError(t, err)
	require.Equal(t, res.Appended, again.Appended)
	env.WaitCaughtUp(t, 2*time.Minute)
	require.Equal(t, before, takeSnapshot(t, env.Pool))
	verify(t, env.Pool)
}

// checkImported checks what docs/import.md promises of an import of h.
func checkImported(t *testing.T, env *testenv.Env, h history) {
	t.Helper()
	pool := env.Pool
	// History: every message, in file order, with its original time and
	// body; one creation and one join besides.
	require.Equal(t, int64(h.convs*h.msgsPerConv), count(t, pool,
		`SELECT count(*) FROM messages WHERE imported AND kind = 'text'`))
	require.Equal(t, int64(h.convs*(h.msgsPerConv+2)), count(t, pool, `SELECT sum(last_seq) FROM conversations`))
	rows, err := pool.Query(context.Background(), `SELECT ic.external_id, m.seq, m.body, m.created_at
FROM messages m JOIN import_conversations ic ON ic.conversation_id = m.conversation_id
WHERE m.kind = 'text' ORDER BY ic.external_id, m.seq`)
	require.NoError(t, err)
	next := map[string]int{}
	lastSeq := map[string]int64{}
	for rows.Next() {
		var ext, b string
		var seq int64
		var at time.Time
		require.NoError(t, rows.Scan(&ext, &seq, &b, &at))
		i, err := strconv.Atoi(ext[len("room-"):])
		require.NoError(t, err)
		next[ext]++
		j := next[ext]
		require.Greater(t, seq, lastSeq[ext])
		lastSeq[ext] = seq
		require.Equal(t, body(i, j), b, "conversation %s message %d", ext, j)
		require.True(t, msgTime(i, j).Equal(at), "conversation %s message %d at %s, want %s", ext, j, at, msgTime(i, j))
	}
	require.NoError(t, rows.Err())
	rows.Close()
	require.Len(t, next, h.convs)

	// Inboxes: no imported message or join of another; per member and
	// conversation at most its creation or join and one record entry.
	require.Zero(t, count(t, pool, `SELECT count(*) FROM inbox i JOIN messages m
  ON m.conversation_id = i.conversation_id AND m.seq = i.seq AND i.kind = 1
WHERE m.kind = 'text' OR (m.seq > 1 AND (m.body::jsonb->>'user_id')::bigint <> i.user_id)`))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM (SELECT user_id, conversation_id FROM inbox
  GROUP BY 1, 2 HAVING count(*) > 2) x`))
	require.Equal(t, int64(2*h.convs*(h.members+1)), count(t, pool, `SELECT count(*) FROM inbox`))
	// Their entries carry the time of the import (retention counts from it).
	require.Zero(t, count(t, pool, `SELECT count(*) FROM inbox WHERE created_at < now() - interval '1 hour'`))
	// Nothing imported is unread: no text message of another after a
	// member's read position.
	require.Zero(t, count(t, pool, `SELECT count(*) FROM records r
JOIN messages m ON m.conversation_id = r.conversation_id AND m.seq > r.read_seq AND m.kind = 'text' AND m.sender_id <> r.user_id
WHERE NOT r.removed`))
}
