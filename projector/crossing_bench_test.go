package projector_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/projector"
)

// everyoneElsewhere places every user on another server.
type everyoneElsewhere struct{}

func (everyoneElsewhere) Place(user int64) (int32, bool) {
	return placement.OfUser(user, shardParts), false
}

// BenchmarkCrossing measures what a crossing costs at the projection: the
// same batches of sends into 7-member conversations applied with every
// member on the conversation's server (local: one transaction), and with
// every member on another (crossed: the conversation stage writes the
// deliveries, a relay reads and deletes them, and the user stage applies
// them on the other database). Kafka's hop is not in it (inboxd-bench
// measures the pipeline). Figures: µs of wall time per message and per
// inbox entry, run beside each other on the same server:
//
//	go test ./projector -run '^$' -bench Crossing -benchtime 200x
func BenchmarkCrossing(b *testing.B) {
	for _, crossed := range []bool{false, true} {
		name := "local"
		if crossed {
			name = "crossed"
		}
		b.Run(name, func(b *testing.B) { benchCrossing(b, crossed) })
	}
}

func benchCrossing(b *testing.B, crossed bool) {
	ctx := context.Background()
	const convs, members, perBatch = 50, 7, 10
	conv, _ := pgtest.NewPool(b)
	cfg := projector.Config{Topic: eventsTopic}
	if crossed {
		cfg.Users = everyoneElsewhere{}
	}
	stage, err := projector.New(cfg, conv)
	require.NoError(b, err)
	var users *projector.Projector
	var userPool *pgxpool.Pool
	if crossed {
		userPool, _ = pgtest.NewPool(b)
		users, err = projector.New(projector.Config{Topic: eventsTopic}, userPool)
		require.NoError(b, err)
	}
	var offset int64
	dOffset := map[int32]int64{}
	apply := func(evs []*events.Event) {
		recs := make([]projector.Record, len(evs))
		for i, e := range evs {
			recs[i] = projector.Record{Partition: 0, Offset: offset, Event: e}
			offset++
		}
		_, err := stage.Apply(ctx, recs)
		require.NoError(b, err)
		if !crossed {
			return
		}
		// The relay and the user stage, without Kafka.
		rows, err := conv.Query(ctx, `SELECT id, destination, payload FROM outbox ORDER BY id`)
		require.NoError(b, err)
		var ids []int64
		var drs []projector.DeliveryRecord
		for rows.Next() {
			var id int64
			var dst int32
			var raw []byte
			require.NoError(b, rows.Scan(&id, &dst, &raw))
			var d projector.Delivery
			require.NoError(b, json.Unmarshal(raw, &d))
			ids = append(ids, id)
			drs = append(drs, projector.DeliveryRecord{Partition: dst, Offset: dOffset[dst], Delivery: &d})
			dOffset[dst]++
		}
		require.NoError(b, rows.Err())
		_, err = conv.Exec(ctx, `DELETE FROM outbox WHERE id = ANY($1::bigint[])`, ids)
		require.NoError(b, err)
		_, err = users.ApplyDeliveries(ctx, drs)
		require.NoError(b, err)
	}
	var setup []*events.Event
	for c := int64(1); c <= convs; c++ {
		e := events.New(events.ConversationCreated, c, c*10)
		e.Title = "bench"
		for m := int64(1); m < members; m++ {
			e.Members = append(e.Members, c*10+m)
		}
		setup = append(setup, e)
	}
	apply(setup)
	body := "a message of a usual length, some forty bytes"
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		batch := make([]*events.Event, perBatch)
		for j := range batch {
			c := int64((i*perBatch+j)%convs) + 1
			e := events.New(events.MessageSent, c, c*10+int64(j%members))
			e.MsgID, e.Body = uuid.NewString(), &body
			batch[j] = e
		}
		apply(batch)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	msgs := float64(b.N * perBatch)
	b.ReportMetric(float64(elapsed.Microseconds())/msgs, "µs/msg")
	b.ReportMetric(float64(elapsed.Microseconds())/(msgs*members), "µs/entry")
	b.ReportMetric(0, "ns/op")
	if crossed {
		var n int64
		require.NoError(b, userPool.QueryRow(ctx, `SELECT count(*) FROM inbox`).Scan(&n))
		require.EqualValues(b, int64(2*convs*members)+int64(b.N*perBatch*members), n, "every entry applied on the users' server (a creation is a message and a record entry each)")
	}
}
