package replay_test

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/replay"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func appendAll(t testing.TB, p *producer.Producer, evs []*events.Event, dup bool) {
	t.Helper()
	ctx := testenv.Ctx(t, 2*time.Minute)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, e := range evs {
		for i := 0; i < 1+btoi(dup && e.Type == events.MessageSent); i++ {
			wg.Add(1)
			p.AppendAsync(ctx, e, func(_ producer.Position, err error) {
				defer wg.Done()
				if err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	require.NoError(t, first)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// snapshot is the comparable content of the projections: conversation-level
// tables exactly, inboxes as sets of (conversation, seq).
type snapshot struct {
	conversations, messages, spans, records, rejections []string
	inboxes                                             map[int64][]string
	epoch                                               int64
}

// take is the snapshot of env's deployment: of its union on several
// servers (each conversation's state from its server, each user's from
// theirs), with the deployment's one epoch.
func take(t testing.TB, env *testenv.Env) snapshot {
	t.Helper()
	s := takeOf(t, env.Union(t))
	require.NoError(t, env.Pool.QueryRow(testenv.Ctx(t, time.Minute), `SELECT epoch FROM meta`).Scan(&s.epoch))
	return s
}

func takeOf(t testing.TB, pool *pgxpool.Pool) snapshot {
	t.Helper()
	ctx := testenv.Ctx(t, time.Minute)
	lines := func(q string) []string {
		rows, err := pool.Query(ctx, q)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out = append(out, s)
		}
		require.NoError(t, rows.Err())
		return out
	}
	s := snapshot{
		conversations: lines(`SELECT concat_ws('|', id, title, created_by, created_at, last_seq, last_at) FROM conversations ORDER BY id`),
		messages:      lines(`SELECT concat_ws('|', conversation_id, seq, msg_id, sender_id, kind, body, created_at, deleted, edited_at, reply_to, reactions::text) FROM messages ORDER BY 1`),
		spans:         lines(`SELECT concat_ws('|', conversation_id, user_id, joined_seq, left_seq) FROM member_spans ORDER BY 1`),
		records:       lines(`SELECT concat_ws('|', user_id, conversation_id, pinned, muted, read_seq, removed) FROM records ORDER BY 1`),
		rejections:    lines(`SELECT concat_ws('|', event_id, reason, "partition", "offset") FROM rejections ORDER BY 1`),
		inboxes:       map[int64][]string{},
	}
	rows, err := pool.Query(ctx, `SELECT user_id, conversation_id, seq FROM inbox WHERE kind = 1`)
	require.NoError(t, err)
	for rows.Next() {
		var u, c, q int64
		require.NoError(t, rows.Scan(&u, &c, &q))
		s.inboxes[u] = append(s.inboxes[u], fmt.Sprint(c, "/", q))
	}
	rows.Close()
	for _, v := range s.inboxes {
		sort.Strings(v)
	}
	return s
}

func workloadEnv(t *testing.T, seed uint64, n int) (*testenv.Env, *workload.Generator, func()) {
	return workloadEnvOn(t, seed, n, 0)
}

// workloadEnvOn is workloadEnv on that many servers (0: as
// INBOXD_TEST_PG_SERVERS says).
func workloadEnvOn(t *testing.T, seed uint64, n, servers int) (*testenv.Env, *workload.Generator, func()) {
	env := testenv.New(t, testenv.Options{Partitions: 6, Servers: servers})
	stop := env.StartFanout(t)
	g := workload.New(workload.Config{Seed: seed, Users: 400, Conversations: 80,
		EditPct: 3, DeletePct: 2, ReactPct: 6, UnreactPct: 2, ReplyPct: 10})
	evs := make([]*events.Event, n)
	for i := range evs {
		evs[i] = g.Next()
	}
	for i := 0; i < n; i += 2000 {
		appendAll(t, env.Producer, evs[i:min(i+2000, n)], true)
	}
	env.WaitCaughtUp(t, 2*time.Minute)
	return env, g, stop
}

func cfg(env *testenv.Env) replay.Config {
	return replay.Config{Brokers: env.Brokers, Topic: env.Topic, Logger: env.Logger, Progress: &bytes.Buffer{}, BatchRecords: 3000}
}

// Replay produces conversation-level projections identical to the live
// ones and inboxes equal as sets, under a new epoch, and fanout continues
// where the replay ended.
func TestReplayRebuildsTheSameProjections(t *testing.T) {
	env, g, stop := workloadEnv(t, 11, 8000)
	ctx := testenv.Ctx(t, 3*time.Minute)
	before := take(t, env)
	_, err := env.Replay(ctx, cfg(env))
	require.ErrorIs(t, err, replay.ErrFanoutRunning, "replay refuses beside a live fanout")
	stop()

	res, err := env.Replay(ctx, cfg(env))
	require.NoError(t, err)
	require.Greater(t, res.Epoch, before.epoch)
	after := take(t, env)
	require.Equal(t, before.conversations, after.conversations)
	require.Equal(t, before.messages, after.messages)
	require.Equal(t, before.spans, after.spans)
	require.Equal(t, before.records, after.records)
	require.Equal(t, before.rejections, after.rejections)
	require.Equal(t, before.inboxes, after.inboxes)
	env.Verify(t)

	// Fanout continues exactly where the replay ended.
	env.StartFanout(t)
	more := make([]*events.Event, 1000)
	for i := range more {
		more[i] = g.Next()
	}
	appendAll(t, env.Producer, more, false)
	env.WaitCaughtUp(t, 2*time.Minute)
	got := map[int64]int64{}
	rows, err := env.Union(t).Query(ctx, `SELECT id, last_seq FROM conversations`)
	require.NoError(t, err)
	for rows.Next() {
		var id, s int64
		require.NoError(t, rows.Scan(&id, &s))
		got[id] = s
	}
	rows.Close()
	require.Equal(t, g.LastSeq, got)
	env.Verify(t)
}

// --verify passes on clean projections while fanout runs, and detects a
// deleted inbox row and a changed body.
//
// On one server whatever INBOXD_TEST_PG_SERVERS says: --verify compares
// one server's projections with its rebuilt shadow, and a sharded replay
// refuses it (inboxd verify checks each server and the crossing).
func TestVerifyDetectsCorruption(t *testing.T) {
	env, _, _ := workloadEnvOn(t, 12, 4000, 1)
	ctx := testenv.Ctx(t, 3*time.Minute)
	c := cfg(env)
	c.Verify = true
	res, err := replay.Run(ctx, c, env.Pool)
	require.NoError(t, err)
	require.True(t, res.Diff.Empty(), res.Diff.String())

	_, err = env.Pool.Exec(ctx, `DELETE FROM inbox WHERE (user_id, inbox_seq) = (SELECT user_id, inbox_seq FROM inbox WHERE kind = 1 ORDER BY user_id, inbox_seq LIMIT 1 OFFSET 17)`)
	require.NoError(t, err)
	_, err = env.Pool.Exec(ctx, `UPDATE messages SET body = 'tampered' WHERE (conversation_id, seq) = (SELECT conversation_id, seq FROM messages WHERE kind = 'text' LIMIT 1)`)
	require.NoError(t, err)
	res, err = replay.Run(ctx, c, env.Pool)
	require.NoError(t, err)
	require.False(t, res.Diff.Empty())
	out := res.Diff.String()
	require.Contains(t, out, "only in the rebuilt inbox")
	require.Contains(t, out, "tampered")
	require.Contains(t, out, "VIOLATED", "the live I1 check fails too")
	var schemas int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'inboxd_shadow'`).Scan(&schemas))
	require.Zero(t, schemas, "--verify leaves no shadow behind")
}

// A replay killed in its middle leaves the live projections alone; running
// it again ends correct.
func TestReplayKilledThenRunAgain(t *testing.T) {
	env, _, stop := workloadEnv(t, 13, 8000)
	stop()
	ctx := testenv.Ctx(t, 3*time.Minute)
	before := take(t, env)
	p := testenv.Start(t, []string{"DATABASE_URL=" + env.DatabaseURL, "INBOXD_KAFKA_BROKERS=" + strings.Join(env.Brokers, ","),
		"INBOXD_TOPIC=" + env.Topic, "INBOXD_REPLAY_BATCH_RECORDS=50"}, "replay")
	require.NoError(t, p.WaitOutput("replay: ", time.Minute), "progress lines")
	p.Kill()
	require.NotContains(t, p.Output(), "new epoch", "killed before the swap")
	mid := take(t, env)
	require.Equal(t, before, mid, "the live projections are untouched by a killed replay")

	res, err := env.Replay(ctx, cfg(env))
	require.NoError(t, err)
	require.Greater(t, res.Epoch, before.epoch)
	after := take(t, env)
	after.epoch = before.epoch
	require.Equal(t, before, after)
}
