package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/inboxd/inboxd/importer"
	"github.com/inboxd/inboxd/internal/config"
)

// runImport is `inboxd import --file data.ndjson`: bulk import of another
// chat system's history through the log (docs/import.md).
func runImport(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	var c common
	c.bind(fs, true)
	file := fs.String("file", "", "NDJSON file of conversations, members and messages to import (docs/import.md)")
	source := fs.String("source", importer.DefaultSource, "name of the system the file comes from; it namespaces the external ids (and their mapping and checkpoints)")
	chunk := fs.Int("chunk-lines", importer.DefaultChunkLines, "lines appended between two checkpoints (a killed import resumes from the last one)")
	maxErrors := fs.Int("max-errors", importer.DefaultMaxErrors, "refused lines listed before the check stops reading the file")
	checkOnly := fs.Bool("check", false, "only check the file: list its refused lines, write nothing")
	restart := fs.Bool("restart", false, "ignore the file's checkpoint and append every line again (each is still projected at most once)")
	wait := fs.Bool("wait", true, "wait until the fanout has projected the import, then check that every message of the file is projected")
	fs.Usage = config.Usage(fs, "inboxd import --file data.ndjson: import conversations, members and history from another chat system through the log")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	log, err := c.logger()
	if err != nil {
		return err
	}
	cfg := importer.Config{File: *file, Source: *source, ChunkLines: *chunk, MaxErrors: *maxErrors, MaxBody: c.maxBody,
		CheckOnly: *checkOnly, Restart: *restart, Wait: *wait, Progress: os.Stderr, Logger: log}
	if *checkOnly {
		res, err := importer.Run(ctx, cfg, nil, nil)
		return reportImport(res, err, true)
	}
	pool, prod, closeAll, err := c.connect(ctx, log)
	if err != nil {
		return err
	}
	defer closeAll()
	pl, _, closeServers, err := c.openPlacement(ctx, pool, log)
	if err != nil {
		return err
	}
	defer closeServers()
	if len(pl.Pools) > 1 {
		cfg.Servers = pl.Pools
	}
	res, err := importer.Run(ctx, cfg, pool, prod)
	return reportImport(res, err, false)
}

// reportImport prints what an import did; refused lines exit 1.
func reportImport(res importer.Result, err error, checkOnly bool) error {
	if errors.Is(err, importer.ErrRefused) {
		fmt.Fprintf(os.Stderr, "inboxd import: %v\n", err)
		return exitCode(1)
	}
	if err != nil {
		return err
	}
	fmt.Printf("file: %d lines, %d conversations, %d members added, %d messages (sha256 %s)\n",
		res.Lines, res.Conversations, res.Members, res.Messages, res.SHA256)
	switch {
	case checkOnly:
		fmt.Println("every line is accepted")
	case res.Appended == 0:
		fmt.Println("already imported: nothing appended")
	default:
		fmt.Printf("appended %d events from line %d in %s; done in %s: %.0f messages/s\n",
			res.Appended, res.From, res.Append.Round(1e6), res.Total.Round(1e6), res.Rate())
	}
	return nil
}
