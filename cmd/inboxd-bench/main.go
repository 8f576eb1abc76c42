// Command inboxd-bench measures the figures of docs/benchmarks.md, each next
// to a reference taken in the same run. It parses the flags of a figure
// (every flag has an INBOXD_* environment twin, as in inboxd), builds the
// run's infrastructure (internal/bench.NewEnv) and runs the figure.
//
// It is a binary of its own so that the server, cmd/inboxd, links none of the
// harness: no load generators, no pixel font, no PNG charts.
//
// # Processes
//
// The orchestrator (`inboxd-bench <figure>`) starts its children by running
// this same executable again with two hidden commands:
//
//	inboxd-bench serve <json>          the gateway under test, or the bare echo server
//	inboxd-bench worker <kind> <json>  a load generator (e2e, sync, idle, storm, changes, large)
//
// The server under test is the gateway package in a process of its own, not
// the inboxd binary: it is built with gateway.New and served on an
// http.Server with the settings of `inboxd gateway`, and the same server also
// mounts the sync figure's reference handler (GET /bench/trivial) and a
// control listener (memory readings after a GC, CPU profiles). Neither of
// those belongs in the production binary, and the reference must share the
// gateway's process and HTTP stack to be one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/inboxd/inboxd/internal/bench"
	"github.com/inboxd/inboxd/internal/config"
)

const usage = `inboxd-bench: the figures of docs/benchmarks.md, each next to a reference measured in the same run

usage: inboxd-bench <figure> [flags]

figures:
  fanout   committed inbox rows/s through producer -> kfake -> fanout -> PostgreSQL, vs a plain COPY;
           idle append -> NOTIFY vs a single-row commit; replay vs live
  e2e      send -> WebSocket push latency at fixed loads and the highest sustained one, vs commit latency;
           the fixed loads again with the sends over the WebSocket; CPU per message vs the goals' recorded baseline
  sync     sync pages/s and 304s/s over a 1M-row inbox, vs a trivial handler on the same server
  idle     bytes per idle WebSocket of the gateway, vs a bare gorilla/websocket echo server
  storm    reconnect storm after a gateway restart: the SDK vs a naive client
  changes  edit -> WebSocket push latency vs a send's at the same rate; update entries written
           for a burst of reactions on one message of a 500-member conversation
  large    read fan-out: an N-member conversation built by bulk add; send -> push to C connected members
           at R msg/s, small conversations' push p99 with and without it; inbox rows per message;
           delivery checked seq by seq; an offline member's catch-up; sync cost of 50 channels
  attachments
           upload + send of a 1 MiB file end to end vs a plain PUT of the same sealed bytes to the
           same store (SeaweedFS); the gateway's CPU and resident memory per upload; thumbnails/s
           of 2000x1500 photos sent at once and a lone photo's send -> thumbnail announced, vs the
           bench decoding, scaling and encoding the same photo
  shards   sharded projection on 2 servers: inbox rows/s vs 1 server; a crossed entry's latency vs a local one's
  search   GET /v1/search by kind of query (words, phrase, prefix, CJK, filters) over 1M messages, vs a
           SELECT of as many rows by primary key; the index's size; fan-out messages/s with and
           without the search column and index
  all      every figure, then the tables and charts of docs/benchmarks.md (make bench); the
           report starts with the goals, each named and computed from the run's results
  report   the tables and charts again from the JSON of a bench all (--json); given several
           (--from a.json --from b.json --from c.json, each a separate run), the ranges over
           them: every figure that moves with its value in each run and min - max, the goals
           met in how many runs, then the full tables of the first run

run 'inboxd-bench <figure> -h' for its flags`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		// stopped by a signal: a clean stop
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "inboxd-bench: %v\n", err)
		os.Exit(1)
	}
}

// errUsage ends the process with exit code 2 after the usage was printed.
var errUsage = errors.New("usage")

// run dispatches args: a figure, report, or a child of a running bench.
func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return errUsage
	}
	switch name := args[0]; {
	case name == "-h" || name == "--help" || name == "help":
		fmt.Fprintln(os.Stderr, usage)
		return nil
	case bench.IsChild(args):
		// The server under test and the load generators: children of a
		// running bench, not for direct use.
		return bench.RunChild(ctx, args)
	case name == "report":
		return runReport(args[1:])
	default:
		fig, ok := figures[name]
		if !ok {
			return fmt.Errorf("unknown figure %q (run 'inboxd-bench -h')", name)
		}
		return runFigure(ctx, name, fig, args[1:])
	}
}

// runFigure parses the flags of one figure, builds the environment of the
// run, runs the figure and writes its table and outputs.
func runFigure(ctx context.Context, name string, fig figure, args []string) error {
	fs := flag.NewFlagSet("inboxd-bench "+name, flag.ContinueOnError)
	var dbURL, jsonOut, mdOut, outDir string
	fs.StringVar(&dbURL, "database-url", "", "PostgreSQL admin URL on which the run creates its databases (default: start a private server)")
	fs.StringVar(&jsonOut, "json", "", "write the results as JSON to this file")
	fs.StringVar(&mdOut, "md", "", "write the result table as Markdown to this file")
	fs.StringVar(&outDir, "out", "", "keep the artifacts (CPU profiles) in this directory (default: a temporary one)")
	runFig := fig.bind(fs)
	fs.Usage = config.Usage(fs, "inboxd-bench "+name+": "+fig.summary)
	if err := config.Parse(fs, args); err != nil {
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
	res, runErr := runFig(ctx, env)
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

// runReport redraws the report and charts from the JSON of one bench all
// or more, and prints the goals (one run) or the ranges (several).
func runReport(args []string) error {
	fs := flag.NewFlagSet("inboxd-bench report", flag.ContinueOnError)
	var in []string
	var docs, images string
	fs.Func("from", "JSON written by bench all --json (required); repeat it, or separate by commas, for the ranges over several runs (the first run's full tables, charts and profiles are kept)", func(v string) error {
		in = append(in, config.SplitList(v)...)
		return nil
	})
	fs.StringVar(&docs, "docs", "docs/benchmarks.md", "report whose generated blocks are replaced (empty: none)")
	fs.StringVar(&images, "images", "docs/images", "directory of the charts (empty: none)")
	fs.Usage = config.Usage(fs, "inboxd-bench report: the tables and charts again from the results of a bench all, or the ranges over several")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if len(in) == 0 {
		return errors.New("--from is required")
	}
	var runs []bench.AllResult
	for _, p := range in {
		res, err := bench.ReadAllResult(p)
		if err != nil {
			return err
		}
		runs = append(runs, res)
	}
	fmt.Println(bench.Summary(runs))
	return bench.WriteReports(runs, docs, images)
}
