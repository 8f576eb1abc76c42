package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
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
