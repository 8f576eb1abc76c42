package projector_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/shardtest"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/projector"
)

const (
	eventsTopic = "inboxd.events"
	shardParts  = 4
)

// shardedWorld is a projection on two servers (two databases here) beside
// the same log projected on one: the conversation stages apply the event
// topic's partitions of their server, the test relays their outboxes to
// an in-memory deliveries topic, with the copies a relay that crashes
// between producing and deleting makes, and the user stages apply it with
// redeliveries.
type shardedWorld struct {
	t      *testing.T
	ctx    context.Context
	rnd    *rand.Rand
	m      *placement.Map
	one    *pgxpool.Pool
	single *projector.Projector
	shards [2]*pgxpool.Pool
	stages [2]*projector.Projector

	log        [shardParts][]projector.Record
	pos        [shardParts]int
	deliveries [shardParts][]projector.DeliveryRecord
	upos       [shardParts]int
	produced   map[[3]int64]bool // (destination, source, offset) of every delivery produced
	crossed    int
}

func newShardedWorld(t *testing.T, seed uint64) *shardedWorld {
	ctx := context.Background()
	w := &shardedWorld{t: t, ctx: ctx, rnd: rand.New(rand.NewPCG(seed, seed+1)), produced: map[[3]int64]bool{}}
	w.m = placement.NewMap(2, []placement.Server{{ID: 1, Name: "one"}, {ID: 2, Name: "two"}},
		placement.Assignment{Partition: 2, Server: 2}, placement.Assignment{Partition: 3, Server: 2})
	w.one, _ = pgtest.NewPool(t)
	var err error
	w.single, err = projector.New(projector.Config{Topic: eventsTopic, LargeThreshold: 12}, w.one)
	require.NoError(t, err)
	for i := range w.shards {
		w.shards[i], _ = pgtest.NewPool(t)
		w.stages[i], err = projector.New(projector.Config{Topic: eventsTopic, LargeThreshold: 12,
			Users: placement.Users{Map: w.m, Server: int32(i + 1), Partitions: shardParts}}, w.shards[i])
		require.NoError(t, err)
	}
	return w
}

// server is the index of the shard holding partition p.
func (w *shardedWorld) server(p int32) int { return int(w.m.Server(p)) - 1 }

// append adds n events of g to their conversations' partitions, now and
// then twice (a producer's retry).
func (w *shardedWorld) append(g *workload.Generator, n int) {
	for range n {
		w.appendEvent(g.Next())
	}
}

func (w *shardedWorld) appendEvent(e *events.Event) {
	{
		p := placement.OfConversation(e.ConversationID, shardParts)
		copies := 1
		if w.rnd.IntN(40) == 0 {
			copies = 2
		}
		for range copies {
			w.log[p] = append(w.log[p], projector.Record{Partition: p, Offset: int64(len(w.log[p])), Event: e})
		}
	}
}

// step applies one batch of the event topic (a few records of some
// partitions, now and then redelivered) on one server and on the two, and
// moves deliveries along.
func (w *shardedWorld) step() bool {
	var batch []projector.Record
	for p := range shardParts {
		if w.pos[p] >= len(w.log[p]) || w.rnd.IntN(3) == 0 {
			continue
		}
		if w.rnd.IntN(10) == 0 {
			w.pos[p] = max(0, w.pos[p]-1-w.rnd.IntN(5)) // a redelivery
		}
		end := min(len(w.log[p]), w.pos[p]+1+w.rnd.IntN(30))
		batch = append(batch, w.log[p][w.pos[p]:end]...)
		w.pos[p] = end
	}
	if len(batch) == 0 {
		return w.left() > 0
	}
	_, err := w.single.Apply(w.ctx, batch)
	require.NoError(w.t, err)
	var parts [2][]projector.Record
	for _, r := range batch {
		parts[w.server(r.Partition)] = append(parts[w.server(r.Partition)], r)
	}
	for i, recs := range parts {
		if len(recs) == 0 {
			continue
		}
		res, err := w.stages[i].Apply(w.ctx, recs)
		require.NoError(w.t, err)
		w.crossed += res.Crossed
	}
	if w.rnd.IntN(2) == 0 {
		w.relay(w.rnd.IntN(5) != 0)
	}
	if w.rnd.IntN(2) == 0 {
		w.userStages()
	}
	return true
}

func (w *shardedWorld) left() int {
	n := 0
	for p := range shardParts {
		n += len(w.log[p]) - w.pos[p]
	}
	return n
}

// relay produces every outbox row to the deliveries topic on its
// destination partition, in id order, and deletes them unless crash (then
// the next relay produces them again).
func (w *shardedWorld) relay(deleteThem bool) {
	for _, pool := range w.shards {
		rows, err := pool.Query(w.ctx, `SELECT id, destination, payload FROM outbox ORDER BY id`)
		require.NoError(w.t, err)
		var last int64
		for rows.Next() {
			var id int64
			var dst int32
			var raw []byte
			require.NoError(w.t, rows.Scan(&id, &dst, &raw))
			var d projector.Delivery
			require.NoError(w.t, json.Unmarshal(raw, &d))
			w.deliveries[dst] = append(w.deliveries[dst], projector.DeliveryRecord{Partition: dst, Offset: int64(len(w.deliveries[dst])), Delivery: &d})
			w.produced[[3]int64{int64(dst), int64(d.Source), d.Offset}] = true
			last = id
		}
		require.NoError(w.t, rows.Err())
		if deleteThem && last > 0 {
			_, err := pool.Exec(w.ctx, `DELETE FROM outbox WHERE id <= $1`, last)
			require.NoError(w.t, err)
		}
	}
}

// userStages applies a few records of each deliveries partition on its
// server, now and then redelivered, now and then with an undecodable
// record between.
func (w *shardedWorld) userStages() {
	var parts [2][]projector.DeliveryRecord
	for p := range int32(shardParts) {
		if w.upos[p] >= len(w.deliveries[p]) {
			continue
		}
		if w.rnd.IntN(8) == 0 {
			w.upos[p] = max(0, w.upos[p]-1-w.rnd.IntN(3))
		}
		end := min(len(w.deliveries[p]), w.upos[p]+1+w.rnd.IntN(6))
		parts[w.server(p)] = append(parts[w.server(p)], w.deliveries[p][w.upos[p]:end]...)
		w.upos[p] = end
		if w.rnd.IntN(30) == 0 {
			w.deliveries[p] = slices.Insert(w.deliveries[p], w.upos[p], projector.DeliveryRecord{Partition: p})
			for i := w.upos[p]; i < len(w.deliveries[p]); i++ {
				w.deliveries[p][i].Offset = int64(i)
			}
		}
	}
	for i, recs := range parts {
		if len(recs) > 0 {
			_, err := w.stages[i].ApplyDeliveries(w.ctx, recs)
			require.NoError(w.t, err)
		}
	}
}

// drain applies the rest: the event topic, then every delivery.
func (w *shardedWorld) drain() {
	for w.step() {
	}
	w.relay(true)
	for {
		left := 0
		for p := range shardParts {
			left += len(w.deliveries[p]) - w.upos[p]
		}
		if left == 0 {
			return
		}
		w.userStages()
	}
}

// TestShardedProjectionMatchesOne: a randomized workload with duplicates
// and redeliveries, projected on two servers through the two stages,
// gives every user the inbox it gets on one server (the same entries of
// each conversation, in the same order), the same records and messages;
// every delivery produced is applied once (the marks), the outboxes are
// empty, and the invariants hold over the union of the two servers.
func TestShardedProjectionMatchesOne(t *testing.T) {
	w := newShardedWorld(t, 21)
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
		w.appendEvent(e)
	}
	for range 4 {
		w.append(g, 1500)
		for range 40 {
			w.step()
		}
	}
	w.drain()
	ctx := w.ctx

	require.Positive(t, w.crossed, "some entries crossed servers")
	for i, pool := range w.shards {
		var n int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n))
		require.Zero(t, n, "server %d: outbox drained", i+1)
	}
	// Every delivery produced is applied once: each mark is the last
	// delivery of its source, and the entries below equal one server's.
	lastOf := map[[2]int64]int64{}
	for k := range w.produced {
		lastOf[[2]int64{k[0], k[1]}] = max(lastOf[[2]int64{k[0], k[1]}], k[2])
	}
	marks := map[[2]int64]int64{}
	for _, pool := range w.shards {
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
	for i, pool := range w.shards {
		rep, err := projector.VerifyServer(ctx, pool)
		require.NoError(t, err)
		require.True(t, rep.OK(), "server %d: %v", i+1, rep)
		rep, err = projector.Verify(ctx, pool)
		require.NoError(t, err)
		require.False(t, rep.OK(), "server %d alone under the single-server checks", i+1)
	}
	servers := []projector.Querier{w.shards[0], w.shards[1]}
	cross, err := projector.VerifyCrossing(ctx, servers)
	require.NoError(t, err)
	require.Zero(t, cross.Violations, "%v", cross.Samples)
	// The check can fail: one more delivery emitted than applied is one
	// lost.
	_, err = w.shards[0].Exec(ctx, `UPDATE delivery_sources SET emitted = emitted + 1 WHERE (source_partition, destination) IN
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
		return func(u int64) bool { return w.server(placement.OfUser(u, shardParts)) == i }
	}
	all := func(int64) bool { return true }
	want := inboxes(w.one, all)
	got := map[int64]map[int64][]entry{}
	for i, pool := range w.shards {
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
	wantUsers, gotUsers := usersOf(w.one, all), map[int64]userRow{}
	for i, pool := range w.shards {
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
		return func(c int64) bool { return w.server(placement.OfConversation(c, shardParts)) == i }
	}
	wantRecs := recordsOf(w.one, func(int64, int64) bool { return true })
	byUser, byConv := map[[2]int64]recRow{}, map[[2]int64]recRow{}
	for i, pool := range w.shards {
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
	wantMsgs, gotMsgs := messagesOf(w.one, func(int64) bool { return true }), map[[2]int64]string{}
	for i, pool := range w.shards {
		for k, v := range messagesOf(pool, convOn(i)) {
			gotMsgs[k] = v
		}
		require.Len(t, messagesOf(pool, func(c int64) bool { return !convOn(i)(c) }), 0, "server %d holds only its conversations' messages", i+1)
	}
	require.Equal(t, wantMsgs, gotMsgs)

	rep, err := projector.Verify(ctx, w.one)
	require.NoError(t, err)
	require.True(t, rep.OK(), "one server: %v", rep)
	union := shardtest.Servers{Pools: w.shards[:], Map: w.m, Partitions: shardParts, Topic: eventsTopic}.Union(t)
	rep, err = projector.Verify(ctx, union)
	require.NoError(t, err)
	require.True(t, rep.OK(), "the union of the two servers: %v", rep)
	require.EqualValues(t, len(wantMsgs), rep.Messages)
	t.Logf("%d messages, %d inbox rows, %d entries and read positions crossed servers, %d deliveries", rep.Messages, rep.InboxRows, w.crossed, len(w.produced))
}
