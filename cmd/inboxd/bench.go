package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/inboxd/inboxd/internal/bench"
	"github.com/inboxd/inboxd/internal/config"
)

func runBench(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(os.Stderr, "usage: inboxd bench fanout [flags]\n\n  fanout   committed inbox rows/s through producer -> kfake -> fanout -> PostgreSQL, vs a plain COPY")
		return nil
	}
	switch args[0] {
	case "fanout":
		fs := flag.NewFlagSet("bench fanout", flag.ContinueOnError)
		var cfg bench.FanoutConfig
		fs.StringVar(&cfg.DatabaseURL, "database-url", "", "PostgreSQL admin URL (default: start a private server)")
		fs.IntVar(&cfg.Messages, "messages", 100000, "messages to append")
		fs.IntVar(&cfg.Members, "members", 7, "members per conversation")
		fs.IntVar(&cfg.Conversations, "conversations", 2000, "conversations")
		fs.IntVar(&cfg.Partitions, "partitions", 12, "topic partitions")
		fs.IntVar(&cfg.MaxPollRecords, "max-poll-records", 5000, "fanout batch size")
		fs.StringVar(&cfg.JSONOut, "json", "", "write the results as JSON to this file")
		fs.Usage = config.Usage(fs, "inboxd bench fanout: end-to-end committed inbox rows/s vs a plain COPY of the same rows")
		if err := config.Parse(fs, args[1:]); err != nil {
			return err
		}
		res, err := bench.Fanout(ctx, cfg, os.Stderr)
		if err != nil {
			return err
		}
		res.Print(os.Stdout)
		return nil
	default:
		return fmt.Errorf("unknown bench %q", args[0])
	}
}
