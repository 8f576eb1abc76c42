package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/replay"
)

func runReplay(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	var c common
	c.bind(fs, true)
	verify := fs.Bool("verify", false, "rebuild into the shadow schema and diff it with the live projections, touching nothing; exit 1 on a difference")
	batch := fs.Int("replay-batch-records", 20000, "records per replay transaction")
	shadow := fs.String("shadow-schema", "inboxd_shadow", "schema the replay rebuilds into")
	deliveries := fs.String("deliveries-topic", "", "the topic between the servers of a sharded deployment (default <topic>.deliveries): the rebuilt servers go on from its end")
	fs.Usage = config.Usage(fs, "inboxd replay: rebuild the projections from offset 0 under a new epoch (fanout must be stopped), or --verify them")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	log, err := c.logger()
	if err != nil {
		return err
	}
	brokers, pool, err := c.brokersAndDB(ctx, 8, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	rcfg := replay.Config{
		Brokers: brokers, Topic: c.topic, MaxBody: c.maxBody, BatchRecords: *batch, LargeThreshold: c.largeThreshold,
		Shadow: *shadow, Verify: *verify, Progress: os.Stderr, Logger: log,
	}
	pl, _, closeServers, err := c.openPlacement(ctx, pool, log)
	if err != nil {
		return err
	}
	defer closeServers()
	var res replay.Result
	if len(pl.Pools) > 1 {
		// Every server at once: each its partitions, the deliveries
		// between them applied in place (replay.RunSharded).
		res, err = replay.RunSharded(ctx, rcfg, replay.Servers{Pools: pl.Pools, Map: pl.Map, Partitions: pl.Partitions,
			Deliveries: *deliveries})
	} else {
		res, err = replay.Run(ctx, rcfg, pool)
	}
	if errors.Is(err, replay.ErrFanoutRunning) {
		fmt.Fprintf(os.Stderr, "inboxd replay: refused: %v\n", err)
		return exitCode(3)
	}
	if err != nil {
		return err
	}
	fmt.Printf("replayed %d records (%d invalid, skipped as in the DLQ; %d refused by the database, stored as dead letters) in %s: %.0f records/s\n",
		res.Records, res.Invalid, res.DeadLettered, res.Duration.Round(1e6), res.Rate())
	if *verify {
		res.Diff.Print(os.Stdout)
		if !res.Diff.Empty() {
			return exitCode(1)
		}
		return nil
	}
	if len(pl.Pools) > 1 {
		fmt.Printf("%d servers rebuilt under the new epoch %d; the stages continue from offsets %v\n", len(pl.Pools), res.Epoch, res.Offsets)
		return nil
	}
	fmt.Printf("new epoch %d; fanout continues from offsets %v\n", res.Epoch, res.Offsets)
	return nil
}
