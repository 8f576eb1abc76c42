package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/migrations"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/projector"
)

func runMigrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	var c common
	c.bind(fs, false)
	servers := fs.String("add-servers", "", "comma-separated PostgreSQL URLs of more servers: each one the catalog does not have yet is migrated and added; on a new deployment the partitions are then placed round robin over all of them (server 1 the catalog)")
	searchConfig := fs.String("search-config", "", "the PostgreSQL text search configuration messages are indexed and searched with (simple, english, …; empty: keep the database's, simple on a new one); a change recomputes every message's index on every server in one transaction each")
	parts := fs.Int("partitions", producer.DefaultPartitions, "the event topic's partition count, for --add-servers' placement (keep it the topic's)")
	fs.Usage = config.Usage(fs, "inboxd migrate: apply the database migrations (and, with --add-servers, set up the servers of a sharded deployment)")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	log, err := c.logger()
	if err != nil {
		return err
	}
	pool, err := app.OpenDB(ctx, c.databaseURL, 2, true, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	log.Info("migrations applied")
	if dsns := config.SplitList(*servers); len(dsns) > 0 {
		if err := addServers(ctx, pool, dsns, int32(*parts), log); err != nil {
			return err
		}
	}
	if *searchConfig != "" {
		return setSearchConfig(ctx, pool, *searchConfig, log)
	}
	return nil
}

// setSearchConfig sets the search configuration on every server of the
// placement (the catalog alone on one server).
func setSearchConfig(ctx context.Context, catalog *pgxpool.Pool, cfg string, log *slog.Logger) error {
	m, err := placement.Load(ctx, catalog)
	if err != nil {
		return err
	}
	pools := []*pgxpool.Pool{catalog}
	for _, s := range m.Servers[min(1, len(m.Servers)):] {
		p, err := app.OpenDB(ctx, s.DSN, 1, true, log)
		if err != nil {
			return err
		}
		defer p.Close()
		pools = append(pools, p)
	}
	for i, p := range pools {
		start := time.Now()
		n, err := migrations.SetSearchConfig(ctx, p, cfg)
		if err != nil {
			return fmt.Errorf("server %d: %w", i+1, err)
		}
		log.Info("search configuration set", "server", i+1, "config", cfg, "reindexed", n, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// addServers adds the servers of dsns the catalog does not have, each
// waited for as the catalog is: on a new deployment (one server, nothing
// projected) it places the partitions over all of them; on one that holds
// state a new server holds nothing until partitions move to it.
func addServers(ctx context.Context, catalog *pgxpool.Pool, dsns []string, parts int32, log *slog.Logger) error {
	m, err := placement.Load(ctx, catalog)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, s := range m.Servers {
		have[s.DSN] = true
	}
	var missing []string
	for _, dsn := range dsns {
		if !have[dsn] {
			// Up and migrated before it is added: started with the
			// deployment, it may come up later than the catalog.
			p, err := app.OpenDB(ctx, dsn, 1, true, log)
			if err != nil {
				return err
			}
			p.Close()
			missing = append(missing, dsn)
		}
	}
	if len(missing) == 0 {
		log.Info("every server is in the placement already", "servers", len(m.Servers))
		return nil
	}
	var held bool
	if err := catalog.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM consumer_offsets)`).Scan(&held); err != nil {
		return err
	}
	if len(m.Servers) == 1 && !held {
		if err := addAndPlace(ctx, catalog, "server-%d", missing, parts); err != nil {
			return fmt.Errorf("add the servers: %w", err)
		}
		log.Info("placed the partitions over the servers", "servers", len(missing)+1, "partitions", parts)
		return nil
	}
	for _, dsn := range missing {
		s, err := placement.AddServer(ctx, catalog, "", dsn)
		if err != nil {
			return fmt.Errorf("add the server: %w", err)
		}
		log.Info("added a server; it holds no partition until inboxd shards move places some on it", "server", s.ID)
	}
	return nil
}

func runVerify(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	var c common
	c.bind(fs, false)
	fs.Usage = config.Usage(fs, "inboxd verify: check invariants I1-I8 on the projections; exits 1 on a violation")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	log, err := c.logger()
	if err != nil {
		return err
	}
	pool, err := app.OpenDB(ctx, c.databaseURL, 2, false, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	if m, err := placement.Load(ctx, pool); err != nil {
		return err
	} else if m.Sharded() {
		return verifySharded(ctx, pool, m, log)
	}
	rep, err := projector.Verify(ctx, pool)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	rep.Print(os.Stdout)
	if !rep.OK() {
		return exitCode(1)
	}
	return nil
}

// verifySharded checks each server of a sharded deployment by itself
// (projector.VerifyServer) and what crosses them: every delivery emitted
// is applied once (projector.VerifyCrossing). What joins both sides (a
// member on one server missing an entry of a conversation on another)
// only the crossing rule covers; the test suites also check the union.
func verifySharded(ctx context.Context, catalog *pgxpool.Pool, m *placement.Map, log *slog.Logger) error {
	qs := make([]projector.Querier, 0, len(m.Servers))
	for _, s := range m.Servers {
		if s.ID == placement.Catalog {
			qs = append(qs, catalog)
			continue
		}
		pool, err := app.OpenDB(ctx, s.DSN, 2, false, log)
		if err != nil {
			return fmt.Errorf("verify: server %d: %w", s.ID, err)
		}
		defer pool.Close()
		qs = append(qs, pool)
	}
	ok := true
	for i, q := range qs {
		rep, err := projector.VerifyServer(ctx, q)
		if err != nil {
			return fmt.Errorf("verify: server %d: %w", m.Servers[i].ID, err)
		}
		fmt.Printf("server %d (%s):\n", m.Servers[i].ID, m.Servers[i].Name)
		rep.Print(os.Stdout)
		ok = ok && rep.OK()
	}
	c, err := projector.VerifyCrossing(ctx, qs)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	fmt.Printf("across the %d servers (placement version %d):\n", len(m.Servers), m.Version)
	status := "ok"
	if c.Violations > 0 {
		status = fmt.Sprintf("VIOLATED (%d)", c.Violations)
	}
	fmt.Printf("  %-3s %-62s %s\n", c.Invariant, c.Name, status)
	for _, s := range c.Samples {
		fmt.Printf("        %s\n", s)
	}
	if c.Violations > 0 || !ok {
		return exitCode(1)
	}
	return nil
}
