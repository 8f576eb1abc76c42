package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/placement"
)

// runOffsets is `inboxd offsets` (compare the stored offsets with the log)
// and `inboxd offsets reset` (an operator's explicit, logged reset).
func runOffsets(ctx context.Context, args []string) error {
	reset := len(args) > 0 && args[0] == "reset"
	if reset {
		args = args[1:]
	}
	fs := flag.NewFlagSet("offsets", flag.ContinueOnError)
	var c common
	c.bind(fs, false)
	fs.StringVar(&c.brokers, "kafka-brokers", "", "comma-separated Kafka bootstrap brokers")
	fs.StringVar(&c.topic, "topic", events.DefaultTopic, "event topic")
	partsFlag := fs.String("reset-partitions", "", "reset: comma-separated partitions, or all (default: every partition whose offsets do not belong to the log)")
	to := fs.String("reset-to", "", "reset: start (the log's first record), end (skip what the log holds) or an offset")
	force := fs.Bool("reset-healthy", false, "reset: also move partitions whose offsets belong to the log (stop the fanouts first)")
	server := fs.Int("shard-server", int(placement.Catalog), "on a sharded placement, the server whose partitions' offsets (stored in its database) are compared or reset; with one server, 1")
	fs.Usage = config.Usage(fs, "inboxd offsets: compare the fanout's stored offsets with the log (exit 1 when they disagree)\n"+
		"inboxd offsets reset --reset-to start|end|N [--reset-partitions P,...]: set them explicitly (logged)")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	log, err := c.logger()
	if err != nil {
		return err
	}
	brokers, pool, err := c.brokersAndDB(ctx, 2, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	// On a sharded placement, one server's partitions, on its database.
	var owns func(int32) bool
	m, err := placement.Load(ctx, pool)
	if err != nil {
		return err
	}
	if m.Sharded() || *server != int(placement.Catalog) {
		srv, ok := m.ServerByID(int32(*server))
		if !ok {
			return fmt.Errorf("offsets: the placement has no server %d (inboxd shards list)", *server)
		}
		id := srv.ID
		owns = func(p int32) bool { return m.Server(p) == id }
		if id != placement.Catalog {
			sp, err := app.OpenDB(ctx, srv.DSN, 2, false, log)
			if err != nil {
				return fmt.Errorf("offsets: server %d: %w", id, err)
			}
			defer sp.Close()
			pool = sp
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if !reset {
		rep, err := fanout.InspectOffsetsOf(ctx, pool, adm, c.topic, owns)
		if err != nil {
			return err
		}
		rep.Print(os.Stdout)
		if !rep.OK() {
			return exitCode(1)
		}
		return nil
	}
	return resetOffsets(ctx, pool, adm, c.topic, *partsFlag, *to, *force, owns, log)
}

// resetOffsets is `inboxd offsets reset`: it parses the partitions, resets
// them and prints what moved.
func resetOffsets(ctx context.Context, pool *pgxpool.Pool, adm *kadm.Client, topic, partsFlag, to string, force bool,
	owns func(int32) bool, log *slog.Logger) error {
	if to == "" {
		return errors.New("offsets reset: --reset-to start|end|N is required")
	}
	var parts []int32
	if partsFlag == "all" {
		rep, err := fanout.InspectOffsetsOf(ctx, pool, adm, topic, owns)
		if err != nil {
			return err
		}
		for _, p := range rep.Partitions {
			parts = append(parts, p.Partition)
		}
	} else if partsFlag != "" {
		for _, s := range strings.Split(partsFlag, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
			if err != nil || n < 0 {
				return fmt.Errorf("offsets reset: --reset-partitions: %q is not a partition", s)
			}
			parts = append(parts, int32(n))
		}
	}
	resets, err := fanout.ResetOffsetsOf(ctx, pool, adm, topic, parts, to, force, owns, log)
	if err != nil {
		return err
	}
	if len(resets) == 0 {
		fmt.Println("nothing to reset: the stored offsets belong to the log")
		return nil
	}
	for _, r := range resets {
		from := "none"
		if r.From != nil {
			from = strconv.FormatInt(*r.From, 10)
		}
		fmt.Printf("partition %d: next offset %s -> %d\n", r.Partition, from, r.To)
	}
	fmt.Println("a running fanout resumes these partitions within its log check interval")
	return nil
}
