package shardtest

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/projector"
)

// World is a projection on two servers (two databases here) beside
// the same log projected on one: the conversation stages apply the event
// topic's partitions of their server, the test relays their outboxes to
// an in-memory deliveries topic, with the copies a relay that crashes
// between producing and deleting makes, and the user stages apply it with
// redeliveries.
type World struct {
	t      *testing.T
	Ctx    context.Context
	rnd    *rand.Rand
	Map    *placement.Map
	One    *pgxpool.Pool // the log on one server
	Single *projector.Projector
	Shards [2]*pgxpool.Pool // the log on two (server 2 holds partitions 2 and 3)
	Stages [2]*projector.Projector

	log        [WorldParts][]projector.Record
	pos        [WorldParts]int
	deliveries [WorldParts][]projector.DeliveryRecord
	upos       [WorldParts]int
	// Produced holds (destination, source, offset) of every delivery
	// produced; Crossed counts the entries and read positions that crossed.
	Produced map[[3]int64]bool
	Crossed  int
}

// The world's event topic and partition count.
const (
	WorldTopic = "inboxd.events"
	WorldParts = 4
)

// Run appends rounds of n events of g, stepping 40 batches after each,
// then drains the world.
func (w *World) Run(g *workload.Generator, rounds, n int) {
	for range rounds {
		w.Append(g, n)
		for range 40 {
			w.Step()
		}
	}
	w.Drain()
}

// OfUser is the index in Shards of user u's server; OfConv of
// conversation c's.
func (w *World) OfUser(u int64) int { return w.Server(placement.OfUser(u, WorldParts)) }
func (w *World) OfConv(c int64) int { return w.Server(placement.OfConversation(c, WorldParts)) }

// Servers is the world's two servers as a Servers.
func (w *World) Servers() Servers {
	return Servers{Pools: w.Shards[:], Map: w.Map, Partitions: WorldParts, Topic: WorldTopic}
}

// NewWorld makes a world of fresh databases, its randomness seeded.
func NewWorld(t *testing.T, seed uint64) *World {
	ctx := context.Background()
	w := &World{t: t, Ctx: ctx, rnd: rand.New(rand.NewPCG(seed, seed+1)), Produced: map[[3]int64]bool{}}
	w.Map = placement.NewMap(2, []placement.Server{{ID: 1, Name: "one"}, {ID: 2, Name: "two"}},
		placement.Assignment{Partition: 2, Server: 2}, placement.Assignment{Partition: 3, Server: 2})
	w.One, _ = pgtest.NewPool(t)
	var err error
	w.Single, err = projector.New(projector.Config{Topic: WorldTopic, LargeThreshold: 12}, w.One)
	require.NoError(t, err)
	for i := range w.Shards {
		w.Shards[i], _ = pgtest.NewPool(t)
		w.Stages[i], err = projector.New(projector.Config{Topic: WorldTopic, LargeThreshold: 12,
			Users: placement.Users{Map: w.Map, Server: int32(i + 1), Partitions: WorldParts}}, w.Shards[i])
		require.NoError(t, err)
	}
	return w
}

// Server is the index of the shard holding partition p.
func (w *World) Server(p int32) int { return int(w.Map.Server(p)) - 1 }

// Append adds n events of g to their conversations' partitions, now and
// then twice (a producer's retry).
func (w *World) Append(g *workload.Generator, n int) {
	for range n {
		w.AppendEvent(g.Next())
	}
}

// AppendEvent adds e to its conversation's partition, now and then twice.
func (w *World) AppendEvent(e *events.Event) {
	{
		p := placement.OfConversation(e.ConversationID, WorldParts)
		copies := 1
		if w.rnd.IntN(40) == 0 {
			copies = 2
		}
		for range copies {
			w.log[p] = append(w.log[p], projector.Record{Partition: p, Offset: int64(len(w.log[p])), Event: e})
		}
	}
}

// Step applies one batch of the event topic (a few records of some
// partitions, now and then redelivered) on one server and on the two, and
// moves deliveries along.
func (w *World) Step() bool {
	var batch []projector.Record
	for p := range WorldParts {
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
	_, err := w.Single.Apply(w.Ctx, batch)
	require.NoError(w.t, err)
	var parts [2][]projector.Record
	for _, r := range batch {
		parts[w.Server(r.Partition)] = append(parts[w.Server(r.Partition)], r)
	}
	for i, recs := range parts {
		if len(recs) == 0 {
			continue
		}
		res, err := w.Stages[i].Apply(w.Ctx, recs)
		require.NoError(w.t, err)
		w.Crossed += res.Crossed
	}
	if w.rnd.IntN(2) == 0 {
		w.relay(w.rnd.IntN(5) != 0)
	}
	if w.rnd.IntN(2) == 0 {
		w.userStages()
	}
	return true
}

func (w *World) left() int {
	n := 0
	for p := range WorldParts {
		n += len(w.log[p]) - w.pos[p]
	}
	return n
}

// relay produces every outbox row to the deliveries topic on its
// destination partition, in id order, and deletes them unless crash (then
// the next relay produces them again).
func (w *World) relay(deleteThem bool) {
	for _, pool := range w.Shards {
		rows, err := pool.Query(w.Ctx, `SELECT id, destination, payload FROM outbox ORDER BY id`)
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
			w.Produced[[3]int64{int64(dst), int64(d.Source), d.Offset}] = true
			last = id
		}
		require.NoError(w.t, rows.Err())
		if deleteThem && last > 0 {
			_, err := pool.Exec(w.Ctx, `DELETE FROM outbox WHERE id <= $1`, last)
			require.NoError(w.t, err)
		}
	}
}

// userStages applies a few records of each deliveries partition on its
// server, now and then redelivered, now and then with an undecodable
// record between.
func (w *World) userStages() {
	var parts [2][]projector.DeliveryRecord
	for p := range int32(WorldParts) {
		if w.upos[p] >= len(w.deliveries[p]) {
			continue
		}
		if w.rnd.IntN(8) == 0 {
			w.upos[p] = max(0, w.upos[p]-1-w.rnd.IntN(3))
		}
		end := min(len(w.deliveries[p]), w.upos[p]+1+w.rnd.IntN(6))
		parts[w.Server(p)] = append(parts[w.Server(p)], w.deliveries[p][w.upos[p]:end]...)
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
			_, err := w.Stages[i].ApplyDeliveries(w.Ctx, recs)
			require.NoError(w.t, err)
		}
	}
}

// Drain applies the rest: the event topic, then every delivery.
func (w *World) Drain() {
	for w.Step() {
	}
	w.relay(true)
	for {
		left := 0
		for p := range WorldParts {
			left += len(w.deliveries[p]) - w.upos[p]
		}
		if left == 0 {
			return
		}
		w.userStages()
	}
}
