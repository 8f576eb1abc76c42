package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/projector"
)

// ApplyWaiting applies on pool, a server's database, every delivery to
// partition p waiting in the deliveries topic: from the offset the server
// stores for p to the topic's end when called, in order, with the user
// stage's own code (ApplyDeliveries: marks, offsets and entries in one
// transaction per chunk) under placement version. It is the settle-out of
// a move (placement.MoveConfig.Settle): the target's stages are fenced
// meanwhile, so nothing else applies p's deliveries or writes in place for
// p's users. It returns the deliveries applied (copies and undecodable
// records move the offset only).
func ApplyWaiting(ctx context.Context, brokers []string, topic string, p int32, pool *pgxpool.Pool, version int64,
	log *slog.Logger) (int, error) {
	var from int64
	err := pool.QueryRow(ctx, `SELECT next_offset FROM consumer_offsets WHERE topic = $1 AND "partition" = $2`, topic, p).Scan(&from)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("the stored offset of %s/%d: %w", topic, p, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(from)}}),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	end, ok := ends.Lookup(topic, p)
	if !ok || end.Err != nil {
		return 0, fmt.Errorf("end offset of %s/%d: %v", topic, p, end.Err)
	}
	if from >= end.Offset {
		return 0, nil
	}
	proj, err := projector.New(projector.Config{Topic: topic, Deliveries: topic, Logger: log, PlacementVersion: version}, pool)
	if err != nil {
		return 0, err
	}
	applied := 0
	for next := from; next < end.Offset; {
		fetches := cl.PollRecords(ctx, 1000)
		if err := ctx.Err(); err != nil {
			return applied, err
		}
		var ferr error
		fetches.EachError(func(t string, part int32, err error) { ferr = fmt.Errorf("fetch %s/%d: %w", t, part, err) })
		if ferr != nil {
			return applied, ferr
		}
		var recs []projector.DeliveryRecord
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end.Offset {
				return
			}
			dr := projector.DeliveryRecord{Partition: r.Partition, Offset: r.Offset}
			var d projector.Delivery
			if err := json.Unmarshal(r.Value, &d); err != nil {
				log.Error("an undecodable delivery is skipped: its entries are lost", "partition", r.Partition, "offset", r.Offset, "err", err)
			} else {
				dr.Delivery = &d
			}
			recs = append(recs, dr)
			next = r.Offset + 1
		})
		if len(recs) == 0 {
			continue
		}
		res, err := proj.ApplyDeliveries(ctx, recs)
		if err != nil {
			return applied, err
		}
		applied += res.Applied
	}
	return applied, nil
}
