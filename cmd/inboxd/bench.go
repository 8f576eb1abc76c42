package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/bench"
	"github.com/inboxd/inboxd/internal/config"
)

const benchUsage = `usage: inboxd bench <figure> [flags]   (docs/benchmarks.md)

figures, each next to a reference measured in the same run:
  fanout   committed inbox rows/s through producer -> kfake -> fanout -> PostgreSQL, vs a plain COPY;
           idle append -> NOTIFY vs a single-row commit; replay vs live
  e2e      send -> WebSocket push latency at fixed loads and the highest sustained one, vs commit latency
  sync     sync pages/s and 304s/s over a 1M-row inbox, vs a trivial handler on the same server
  idle     bytes per idle WebSocket of the gateway, vs a bare gorilla/websocket echo server
  storm    reconnect storm after a gateway restart: the SDK vs a naive client
  all      every figure, then the tables and charts of docs/benchmarks.md
  report   the tables and charts again from the JSON of a bench all (--json)

run 'inboxd bench <figure> -h' for its flags`

func runBench(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(os.Stderr, benchUsage)
		return nil
	}
	if bench.IsChild(args) {
		// The server under test and the load generators: children of a
		// running bench, not for direct use.
		return bench.RunChild(ctx, args)
	}
	fig := args[0]
	if fig == "report" {
		return benchReport(args[1:])
	}
	fs := flag.NewFlagSet("bench "+fig, flag.ContinueOnError)
	var (
		dbURL, jsonOut, mdOut, outDir string
		run                           func(ctx context.Context, env *bench.Env) (bench.Result, error)
	)
	fs.StringVar(&dbURL, "database-url", "", "PostgreSQL admin URL on which the run creates its databases (default: start a private server)")
	fs.StringVar(&jsonOut, "json", "", "write the results as JSON to this file")
	fs.StringVar(&mdOut, "md", "", "write the result table as Markdown to this file")
	fs.StringVar(&outDir, "out", "", "keep the artifacts (CPU profiles) in this directory (default: a temporary one)")
	summary := ""
	switch fig {
	case "fanout":
		var c bench.FanoutConfig
		fs.IntVar(&c.Messages, "messages", 100000, "messages to append")
		fs.IntVar(&c.Members, "members", 7, "members per conversation")
		fs.IntVar(&c.Conversations, "conversations", 2000, "conversations")
		fs.IntVar(&c.Partitions, "partitions", 12, "topic partitions")
		fs.IntVar(&c.MaxPollRecords, "max-poll-records", 5000, "fanout batch size")
		fs.BoolVar(&c.SkipReplay, "skip-replay", false, "leave out the replay figure")
		summary = "inboxd bench fanout: committed inbox rows/s vs a plain COPY of the same rows; idle latency; replay vs live"
		run = func(ctx context.Context, env *bench.Env) (bench.Result, error) {
			r, err := bench.Fanout(ctx, env, c)
			return r, err
		}
	case "e2e":
		var c bench.E2EConfig
		var loads string
		fs.IntVar(&c.Conversations, "conversations", 300, "conversations, each of its own members (one WebSocket per member)")
		fs.IntVar(&c.Members, "members", 7, "members per conversation")
		fs.StringVar(&loads, "loads", "100,1000", "fixed offered loads, msg/s; the ramp starts from the last")
		fs.Float64Var(&c.PhaseSeconds, "phase-seconds", 10, "length of a fixed load")
		fs.Float64Var(&c.RampSeconds, "ramp-seconds", 4, "length of a ramp step")
		fs.IntVar(&c.RampSteps, "ramp-steps", 6, "most ramp steps")
		fs.Float64Var(&c.MaxP99Ms, "max-p99-ms", 500, "push p99 above which a load is not sustained")
		fs.BoolVar(&c.Profile, "profile", true, "take CPU profiles during the last fixed load")
		fs.IntVar(&c.DBMaxConns, "db-max-conns", 0, "the gateway's PostgreSQL pool size (0: pgx's default, as inboxd gateway)")
		summary = "inboxd bench e2e: send -> WebSocket push latency at fixed loads and the highest sustained one, vs commit latency"
		run = func(ctx context.Context, env *bench.Env) (bench.Result, error) {
			l, err := parseFloats(loads)
			if err != nil {
				return nil, fmt.Errorf("--loads: %w", err)
			}
			c.Loads = l
			r, err := bench.E2E(ctx, env, c)
			return r, err
		}
	case "sync":
		var c bench.SyncConfig
		fs.IntVar(&c.Users, "users", 4000, "users (each inbox holds 2*members + messages*members entries)")
		fs.IntVar(&c.Members, "members", 7, "members per conversation and conversations per user")
		fs.IntVar(&c.Messages, "messages", 35, "text messages per conversation")
		fs.IntVar(&c.Conns, "conns", 64, "keep-alive connections of the load generator")
		fs.Float64Var(&c.Seconds, "seconds", 8, "length of each kind of request")
		fs.BoolVar(&c.Profile, "profile", true, "take a CPU profile of the gateway during the pages")
		summary = "inboxd bench sync: sync pages/s and 304s/s over a large inbox vs a trivial handler on the same server"
		run = func(ctx context.Context, env *bench.Env) (bench.Result, error) {
			r, err := bench.Sync(ctx, env, c)
			return r, err
		}
	case "idle":
		var c bench.IdleConfig
		fs.IntVar(&c.Conns, "conns", 15000, "idle WebSockets to hold")
		fs.IntVar(&c.Workers, "workers", 3, "client processes (at least 2)")
		fs.IntVar(&c.IPs, "ips", 2, "127.0.0.x source addresses per client process")
		summary = "inboxd bench idle: bytes per idle WebSocket of the gateway vs a bare gorilla/websocket echo server"
		run = func(ctx context.Context, env *bench.Env) (bench.Result, error) {
			r, err := bench.Idle(ctx, env, c)
			return r, err
		}
	case "storm":
		var c bench.StormConfig
		var modes string
		fs.IntVar(&c.Clients, "clients", 3000, "clients")
		fs.IntVar(&c.Workers, "workers", 2, "client processes")
		fs.DurationVar(&c.RecoverTimeout, "recover-timeout", 45*time.Second, "longest wait for every client to be back")
		fs.DurationVar(&c.Down, "down", 3*time.Second, "how long the gateway stays down between the old process's exit and the new one's start")
		fs.StringVar(&modes, "modes", "sdk,sdk-ws,naive", "kinds of client, in order: sdk (client package defaults), sdk-ws (WebSocket only), naive")
		summary = "inboxd bench storm: request rate during a reconnect storm, the SDK vs a naive client"
		run = func(ctx context.Context, env *bench.Env) (bench.Result, error) {
			c.Modes = config.SplitList(modes)
			r, err := bench.Storm(ctx, env, c)
			return r, err
		}
	case "all":
		var c bench.AllConfig
		var only string
		var quick bool
		fs.StringVar(&c.Docs, "docs", "docs/benchmarks.md", "report whose generated blocks are replaced (empty: none)")
		fs.StringVar(&c.Images, "images", "docs/images", "directory of the charts (empty: none)")
		fs.StringVar(&only, "only", "", "comma-separated figures to run (fanout,e2e,sync,idle,storm); default all")
		fs.BoolVar(&quick, "quick", false, "small sizes, to check the suite in a few minutes (the figures are not the report's)")
		fs.BoolVar(&c.NoProfiles, "no-profiles", false, "skip the CPU profiles")
		summary = "inboxd bench all: every figure, then the tables and charts of docs/benchmarks.md"
		run = func(ctx context.Context, env *bench.Env) (bench.Result, error) {
			c.Only = config.SplitList(only)
			if quick {
				c = c.Quick()
			}
			if c.Docs != "" {
				if _, err := os.Stat(c.Docs); err != nil {
					fmt.Fprintf(os.Stderr, "bench all: %s not found (run from the repository root), the report is not updated\n", c.Docs)
					c.Docs = ""
					if !given(fs, "images") {
						c.Images = ""
					}
				}
			}
			if c.Images != "" {
				if err := os.MkdirAll(c.Images, 0o755); err != nil {
					return nil, err
				}
			}
			r, err := bench.All(ctx, env, c)
			fmt.Fprintf(os.Stderr, "bench all: finished in %.1f minutes\n", r.Seconds/60)
			return r, err
		}
	default:
		return fmt.Errorf("unknown bench %q (run 'inboxd bench -h')", fig)
	}
	fs.Usage = config.Usage(fs, summary)
	if err := config.Parse(fs, args[1:]); err != nil {
		return err
	}
	if _, err := bench.RaiseOpenFiles(); err != nil {
		fmt.Fprintf(os.Stderr, "warning: %v\n", err)
	}
	env, err := bench.NewEnv(ctx, bench.EnvConfig{DatabaseURL: dbURL, OutDir: outDir, Progress: os.Stderr})
	if err != nil {
		return err
	}
	defer env.Close()
	res, runErr := run(ctx, env)
	if res == nil {
		return runErr
	}
	fmt.Println()
	bench.WriteTable(os.Stdout, res.Rows())
	if err := bench.WriteOutputs(res, jsonOut, mdOut); err != nil {
		return errors.Join(runErr, err)
	}
	return runErr
}

// benchReport redraws the report and charts from the JSON of a bench all.
func benchReport(args []string) error {
	fs := flag.NewFlagSet("bench report", flag.ContinueOnError)
	var in, docs, images string
	fs.StringVar(&in, "from", "", "JSON written by bench all --json (required)")
	fs.StringVar(&docs, "docs", "docs/benchmarks.md", "report whose generated blocks are replaced (empty: none)")
	fs.StringVar(&images, "images", "docs/images", "directory of the charts (empty: none)")
	fs.Usage = config.Usage(fs, "inboxd bench report: the tables and charts again from the results of a bench all")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if in == "" {
		return errors.New("--from is required")
	}
	res, err := bench.ReadAllResult(in)
	if err != nil {
		return err
	}
	return bench.WriteReport(&res, docs, images)
}

// given reports whether flag name was set on the command line.
func given(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", p)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("no load")
	}
	return out, nil
}
