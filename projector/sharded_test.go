package projector_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/shardtest"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/projector"
)

const (
	eventsTopic = shardtest.WorldTopic
	shardParts  = shardtest.WorldParts
)

// TestShardedProjectionMatchesOne: a randomized workload with duplicates
// and redeliveries, projected on two servers through the two stages,
// gives every user the inbox it gets on one server (the same entries of
// each conversation, in the same order), the same records and messages;
// every delivery produced is applied once (the marks), the outboxes are
// empty, and the invariants hold over the union of the two servers.
func TestShardedProjectionMatchesOne(t *testing.T) {
	w := shardtest.NewWorld(t, 21)
	g := workload.New(workload.Config{Seed: 21, Users: 70, Conversations: 30, MaxMembers: 16,
		EditPct: 2, DeletePct: 1, ReactPct: 3, UnreactPct: 1, ReplyPct: 2})
	// Imported history too (its read positions cross with the
	// deliveries), in a conversation of its own.
	// Its conversation is on server 2 and member 11 on server 1; the live
	// message is 10's, so that 11's read position is the imported one.
	imported := importedLog(time.Now().UTC().Truncate(time.Microsecond))
	imported[len(imported)-1].ActorID = 10
	for _, e := range imported {
		e.ConversationID = 9001
		w.AppendEvent(e)
	}
	for range 4 {
		w.Append(g, 1500)
		for range 40 {
			w.Step()
		}
	}
	w.Drain()
	ctx := w.Ctx

	require.Positive(t, w.Crossed, "some entries crossed servers")
	for i, pool := range w.Shards {
		var n int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n))
		require.Zero(t, n, "server %d: outbox drained", i+1)
	}
	// Every delivery produced is applied once: each mark is the last
	// delivery of its source, and the entries below equal one server's.
	lastOf := map[[2]int64]int64{}
	for k := range w.Produced {
		lastOf[[2]int64{k[0], k[1]}] = max(lastOf[[2]int64{k[0], k[1]}], k[2])
	}
	marks := map[[2]int64]int64{}
	for _, pool := range w.Shards {
		rows, err := pool.Query(ctx, `SELECT destination, source_partition, applied FROM delivery_marks`)
		require.NoError(t, err)
		for rows.Next() {
			var d, s, a int64
			require.NoError(t, rows.Scan(&d, &s, &a))
			marks[[2]int64{d, s}] = a
		}
		require.NoError(t, rows.Err())
	}
	require.Equal(t, lastOf, marks)
	// Each server by itself: clean by VerifyServer, which leaves out the
	// other server's conversations; Verify, which follows every entry to
	// its conversation, would not be.
	for i, pool := range w.Shards {
		rep, err := projector.VerifyServer(ctx, pool)
		require.NoError(t, err)
		require.True(t, rep.OK(), "server %d: %v", i+1, rep)
		rep, err = projector.Verify(ctx, pool)
		require.NoError(t, err)
		require.False(t, rep.OK(), "server %d alone under the single-server checks", i+1)
	}
	servers := []projector.Querier{w.Shards[0], w.Shards[1]}
	cross, err := projector.VerifyCrossing(ctx, servers)
	require.NoError(t, err)
	require.Zero(t, cross.Violations, "%v", cross.Samples)
	// The check can fail: one more delivery emitted than applied is one
	// lost.
	_, err = w.Shards[0].Exec(ctx, `UPDATE delivery_sources SET emitted = emitted + 1 WHERE (source_partition, destination) IN
  (SELECT source_partition, destination FROM delivery_sources LIMIT 1)`)
	require.NoError(t, err)
	cross, err = projector.VerifyCrossing(ctx, servers)
	require.NoError(t, err)
	require.EqualValues(t, 1, cross.Violations)
	require.Contains(t, cross.Samples[0], "neither applied nor in the outbox")

	// Inboxes: per user and conversation, the same entries in the same
	// order; the same heads.
	type entry struct {
		Kind         int16
		Seq, Version int64
	}
	inboxes := func(pool *pgxpool.Pool, only func(int64) bool) map[int64]map[int64][]entry {
		rows, err := pool.Query(ctx, `SELECT user_id, conversation_id, kind, seq, CASE WHEN kind = 2 THEN 0 ELSE version END
FROM inbox ORDER BY user_id, inbox_seq`)
		require.NoError(t, err)
		out := map[int64]map[int64][]entry{}
		for rows.Next() {
			var u, c int64
			var e entry
			require.NoError(t, rows.Scan(&u, &c, &e.Kind, &e.Seq, &e.Version))
			if !only(u) {
				continue
			}
			if out[u] == nil {
				out[u] = map[int64][]entry{}
			}
			out[u][c] = append(out[u][c], e)
		}
		require.NoError(t, rows.Err())
		return out
	}
	userOn := func(i int) func(int64) bool {
		return func(u int64) bool { return w.Server(placement.OfUser(u, shardParts)) == i }
	}
	all := func(int64) bool { return true }
	want := inboxes(w.One, all)
	got := map[int64]map[int64][]entry{}
	for i, pool := range w.Shards {
		for u, convs := range inboxes(pool, all) {
			require.True(t, userOn(i)(u), "user %d has entries on server %d, not its own", u, i+1)
			got[u] = convs
		}
	}
	require.Equal(t, len(want), len(got))
	for u := range want {
		require.Equal(t, want[u], got[u], "user %d", u)
	}
	type userRow struct{ Head, Version int64 }
	usersOf := func(pool *pgxpool.Pool, only func(int64) bool) map[int64]userRow {
		rows, err := pool.Query(ctx, `SELECT id, inbox_seq, record_version FROM users`)
		require.NoError(t, err)
		out := map[int64]userRow{}
		for rows.Next() {
			var id int64
			var r userRow
			require.NoError(t, rows.Scan(&id, &r.Head, &r.Version))
			if only(id) {
				out[id] = r
			}
		}
		require.NoError(t, rows.Err())
		return out
	}
	wantUsers, gotUsers := usersOf(w.One, all), map[int64]userRow{}
	for i, pool := range w.Shards {
		for id, r := range usersOf(pool, all) {
			require.True(t, userOn(i)(id), "user %d has a row on server %d, not its own", id, i+1)
			gotUsers[id] = r
		}
	}
	require.Equal(t, wantUsers, gotUsers)

	// Records: a user's own server serves them as one server does, and the
	// conversation's server keeps the same rule state.
	type recRow struct {
		Pinned, Muted, Removed bool
		Read                   int64
	}
	recordsOf := func(pool *pgxpool.Pool, keep func(u, c int64) bool) map[[2]int64]recRow {
		rows, err := pool.Query(ctx, `SELECT user_id, conversation_id, pinned, muted, removed, read_seq FROM records`)
		require.NoError(t, err)
		out := map[[2]int64]recRow{}
		for rows.Next() {
			var u, c int64
			var r recRow
			require.NoError(t, rows.Scan(&u, &c, &r.Pinned, &r.Muted, &r.Removed, &r.Read))
			if keep(u, c) {
				out[[2]int64{u, c}] = r
			}
		}
		require.NoError(t, rows.Err())
		return out
	}
	convOn := func(i int) func(int64) bool {
		return func(c int64) bool { return w.Server(placement.OfConversation(c, shardParts)) == i }
	}
	wantRecs := recordsOf(w.One, func(int64, int64) bool { return true })
	byUser, byConv := map[[2]int64]recRow{}, map[[2]int64]recRow{}
	for i, pool := range w.Shards {
		for k, r := range recordsOf(pool, func(u, _ int64) bool { return userOn(i)(u) }) {
			byUser[k] = r
		}
		for k, r := range recordsOf(pool, func(_, c int64) bool { return convOn(i)(c) }) {
			byConv[k] = r
		}
	}
	require.Equal(t, wantRecs, byUser, "records on the users' servers")
	require.Equal(t, wantRecs, byConv, "rule state on the conversations' servers")

	// Messages live on their conversation's server, as on one.
	messagesOf := func(pool *pgxpool.Pool, keep func(int64) bool) map[[2]int64]string {
		rows, err := pool.Query(ctx, `SELECT conversation_id, seq, format('%s %s %s %s %s %s', msg_id, sender_id, body, version, deleted, reactions)
FROM messages`)
		require.NoError(t, err)
		out := map[[2]int64]string{}
		for rows.Next() {
			var c, s int64
			var v string
			require.NoError(t, rows.Scan(&c, &s, &v))
			if keep(c) {
				out[[2]int64{c, s}] = v
			}
		}
		require.NoError(t, rows.Err())
		return out
	}
	wantMsgs, gotMsgs := messagesOf(w.One, func(int64) bool { return true }), map[[2]int64]string{}
	for i, pool := range w.Shards {
		for k, v := range messagesOf(pool, convOn(i)) {
			gotMsgs[k] = v
		}
		require.Len(t, messagesOf(pool, func(c int64) bool { return !convOn(i)(c) }), 0, "server %d holds only its conversations' messages", i+1)
	}
	require.Equal(t, wantMsgs, gotMsgs)

	rep, err := projector.Verify(ctx, w.One)
	require.NoError(t, err)
	require.True(t, rep.OK(), "one server: %v", rep)
	union := w.Servers().Union(t)
	rep, err = projector.Verify(ctx, union)
	require.NoError(t, err)
	require.True(t, rep.OK(), "the union of the two servers: %v", rep)
	require.EqualValues(t, len(wantMsgs), rep.Messages)
	t.Logf("%d messages, %d inbox rows, %d entries and read positions crossed servers, %d deliveries", rep.Messages, rep.InboxRows, w.Crossed, len(w.Produced))
}
