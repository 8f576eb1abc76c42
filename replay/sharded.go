package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/projector"
)

// Servers is a sharded deployment to rebuild as a whole: a pool per server
// of Map.Servers, in the same order (the catalog's first), the event
// topic's partition count and the deliveries topic.
type Servers struct {
	Pools      []*pgxpool.Pool
	Map        *placement.Map
	Partitions int32
	// Deliveries is the topic between the servers' stages. Default
	// <topic>.deliveries, as the fanouts name it.
	Deliveries string
}

// RunSharded rebuilds every server of a sharded deployment from the log
// (docs/operations.md, "Shards"): each server's shadow gets its
// partitions' conversations, as its conversation stage would project
// them; the entries of users on other servers, which the stages send
// through the deliveries topic, go straight from a shadow's outbox into
// the user's server's shadow, applied by the user stage's own code (its
// marks and counts included, so the rebuilt servers verify across); then
// each shadow takes the deliveries topic's end offsets, so that the user
// stages go on after what the rebuild already holds, and the servers are
// swapped in one after the other, under one new epoch.
//
// Every fanout of every server must be stopped (each server's fanout lock
// is taken for the run). The swaps are one transaction per server: a run
// that fails between two leaves servers of two generations, which is
// repaired by running the replay again (as is any failed run). Verify is
// not available across servers: how a user's local and delivered entries
// interleave depends on timing, so a rebuilt inbox is the same set of
// entries in another order, not the same rows.
func RunSharded(ctx context.Context, cfg Config, s Servers) (Result, error) {
	cfg.setDefaults()
	var res Result
	if err := cfg.validate(); err != nil {
		return res, err
	}
	if cfg.Verify {
		return res, errors.New("replay: --verify compares one server's projections; on several servers, replay each into its shadow and run inboxd verify")
	}
	if len(s.Pools) != len(s.Map.Servers) || len(s.Pools) < 2 {
		return res, errors.New("replay: a sharded replay needs a pool for each of two or more servers")
	}
	if s.Deliveries == "" {
		s.Deliveries = cfg.Topic + ".deliveries"
	}
	start := time.Now()
	for i, pool := range s.Pools {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return res, err
		}
		defer conn.Release()
		if err := lockFanout(ctx, conn); err != nil {
			return res, fmt.Errorf("server %d: %w", s.Map.Servers[i].ID, err)
		}
		defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, projection.LockFanout) //nolint:errcheck
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		return res, err
	}
	defer cl.Close()
	end, total, err := endOffsets(ctx, cl, cfg.Topic)
	if err != nil {
		return res, err
	}
	res.Offsets = end
	cfg.Logger.Info("replay of a sharded deployment starting", "topic", cfg.Topic, "records", total, "servers", len(s.Pools))

	shadows := make([]*pgxpool.Pool, len(s.Pools))
	defer func() {
		for _, sp := range shadows {
			if sp != nil {
				sp.Close()
			}
		}
	}()
	for i, pool := range s.Pools {
		if shadows[i], err = prepareShadow(ctx, pool, cfg.Shadow); err != nil {
			return res, fmt.Errorf("server %d: %w", s.Map.Servers[i].ID, err)
		}
	}
	prog := newProgress(cfg.Progress, total)
	for i, srv := range s.Map.Servers {
		mine := map[int32]int64{}
		for p, e := range end {
			if s.Map.Server(p) == srv.ID {
				mine[p] = e
			}
		}
		proj, err := projector.New(projector.Config{Topic: cfg.Topic, Channel: "inboxd_replay", Logger: cfg.Logger,
			LargeThreshold: cfg.LargeThreshold, Users: placement.Users{Map: s.Map, Server: srv.ID, Partitions: s.Partitions}}, shadows[i])
		if err != nil {
			return res, err
		}
		if err := project(ctx, cfg, cl, proj, mine, prog, &res); err != nil {
			return res, fmt.Errorf("server %d: %w", srv.ID, err)
		}
	}
	prog.finish(res.Records)
	if err := s.deliver(ctx, cfg, cl, shadows); err != nil {
		return res, err
	}
	for i, sp := range shadows {
		if err := indexShadow(ctx, sp); err != nil {
			return res, fmt.Errorf("server %d: %w", s.Map.Servers[i].ID, err)
		}
	}
	res.Duration = time.Since(start)
	// One new epoch for every server (a deployment has one, so that a
	// cursor stays valid when its user moves): past each server's, and
	// past the clock.
	least := time.Now().UnixMilli()
	for _, pool := range s.Pools {
		var old int64
		if err := pool.QueryRow(ctx, `SELECT epoch FROM public.meta`).Scan(&old); err != nil {
			return res, err
		}
		least = max(least, old+1)
	}
	for i, pool := range s.Pools {
		shadows[i].Close()
		shadows[i] = nil
		epoch, err := swap(ctx, pool, cfg.Shadow, cfg.Channel, least)
		if err != nil {
			return res, fmt.Errorf("swap server %d (servers before it are swapped: run the replay again): %w", s.Map.Servers[i].ID, err)
		}
		if i == 0 {
			res.Epoch = epoch
		}
	}
	res.Duration = time.Since(start)
	cfg.Logger.Info("replay of a sharded deployment done", "records", res.Records, "invalid", res.Invalid, "servers", len(s.Pools),
		"seconds", res.Duration.Seconds(), "records_per_sec", res.Rate())
	return res, nil
}

// project applies the log's partitions up to end into proj's shadow,
// counting in res and prog.
func project(ctx context.Context, cfg Config, cl *kgo.Client, proj *projector.Projector, end map[int32]int64, prog *progress, res *Result) error {
	return readLog(ctx, cl, cfg, end, func(batch []projector.Record, invalid int64) error {
		t0 := time.Now()
		// A record the database refuses because of its own data (the live
		// fanout dead-lettered it) is skipped the same way here.
		if _, err := proj.ApplyIsolating(ctx, batch, func(r projector.Record, cause error) error {
			res.DeadLettered++
			cfg.Logger.Error("record fails to project: stored as a dead letter, skipped",
				"topic", cfg.Topic, "partition", r.Partition, "offset", r.Offset, "err", cause)
			return nil
		}); err != nil {
			return err
		}
		res.ApplyTime += time.Since(t0)
		res.Records += int64(len(batch))
		res.Invalid += invalid
		prog.set(res.Records)
		return nil
	})
}

// deliver applies every shadow's outbox to the shadows of its users'
// servers, in the outbox's order (each source partition's deliveries in
// their offsets' order), then empties the outboxes and gives each shadow
// the deliveries topic's end offsets of its partitions.
func (s Servers) deliver(ctx context.Context, cfg Config, cl *kgo.Client, shadows []*pgxpool.Pool) error {
	index := map[int32]int{}
	for i, srv := range s.Map.Servers {
		index[srv.ID] = i
	}
	projs := make([]*projector.Projector, len(shadows))
	for i, sp := range shadows {
		var err error
		if projs[i], err = projector.New(projector.Config{Topic: s.Deliveries, Deliveries: s.Deliveries, Channel: "inboxd_replay",
			Logger: cfg.Logger, LargeThreshold: cfg.LargeThreshold}, sp); err != nil {
			return err
		}
	}
	// Offsets in the deliveries topic the rebuild numbers its own
	// deliveries with (per destination), replaced below by the topic's.
	next := map[int32]int64{}
	for i, sp := range shadows {
		after := int64(0)
		for {
			rows, _ := sp.Query(ctx, `SELECT id, destination, payload::text FROM outbox WHERE id > $1 ORDER BY id LIMIT 5000`, after)
			batch := make([][]projector.DeliveryRecord, len(shadows))
			n := 0
			var id int64
			var dst int32
			var payload string
			_, err := pgx.ForEachRow(rows, []any{&id, &dst, &payload}, func() error {
				var d projector.Delivery
				if err := json.Unmarshal([]byte(payload), &d); err != nil {
					return fmt.Errorf("outbox row %d: %w", id, err)
				}
				to, ok := index[s.Map.Server(dst)]
				if !ok {
					return fmt.Errorf("outbox row %d: destination %d is on no server", id, dst)
				}
				batch[to] = append(batch[to], projector.DeliveryRecord{Partition: dst, Offset: next[dst], Delivery: &d})
				next[dst]++
				after, n = id, n+1
				return nil
			})
			if err != nil {
				return fmt.Errorf("server %d's outbox: %w", s.Map.Servers[i].ID, err)
			}
			if n == 0 {
				break
			}
			for to, recs := range batch {
				if _, err := projs[to].ApplyDeliveries(ctx, recs); err != nil {
					return fmt.Errorf("deliveries to server %d: %w", s.Map.Servers[to].ID, err)
				}
			}
		}
		if _, err := sp.Exec(ctx, `DELETE FROM outbox`); err != nil {
			return err
		}
	}
	ends, _, err := endOffsets(ctx, cl, s.Deliveries)
	if err != nil {
		return err
	}
	for p, e := range ends {
		sp := shadows[index[s.Map.Server(p)]]
		if _, err := sp.Exec(ctx, `INSERT INTO consumer_offsets (topic, "partition", next_offset) VALUES ($1, $2, $3)
ON CONFLICT (topic, "partition") DO UPDATE SET next_offset = excluded.next_offset`, s.Deliveries, p, e); err != nil {
			return fmt.Errorf("offsets of %s: %w", s.Deliveries, err)
		}
	}
	return nil
}
