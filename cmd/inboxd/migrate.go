package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/projector"
)

func runMigrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	var c common
	c.bind(fs, false)
	fs.Usage = config.Usage(fs, "inboxd migrate: apply the database migrations")
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
	pool.Close()
	log.Info("migrations applied")
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
