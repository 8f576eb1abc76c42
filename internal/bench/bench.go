// Package bench holds the measurements behind `inboxd-bench`
// (cmd/inboxd-bench). Each figure is reported next to a reference measured in
// the same run, on the same machine, so that the ratio carries over to other
// machines where the absolute number does not.
//
// The server binary, cmd/inboxd, must not import this package: the load
// generators, the pixel font and the PNG charts have no place in production
// (TestServerLinksNoBench in cmd/inboxd checks it).
//
// # Processes
//
// The orchestrator (the process running `inboxd-bench <figure>`) owns the
// infrastructure: a private PostgreSQL (internal/pgserver) or the server of
// DATABASE_URL, an in-process Kafka (kfake) and, where a figure needs the
// log projected, an in-process fanout. The gateway under test runs as a
// child process (`inboxd-bench serve`: the gateway package in process, not
// the inboxd binary, so that its reference handler and its memory and profile
// endpoints can share its server), and so does every load generator
// (`inboxd-bench worker <kind>`), so that the memory and CPU of the gateway
// are its own and a load generator never shares a scheduler with what it
// measures. Both are the orchestrator's own executable run again
// (DefaultRunner). Children talk to the orchestrator over stdin/stdout lines
// (see child.go), die with it (Pdeathsig) and end by themselves at a deadline.
//
// # What is shared
//
// Each figure is a function (Fanout, E2E, Sync, Idle, Storm, Changes,
// Large) with its config, its result and the rows of its table, and its
// load generators run as workers. What the figures have in common is kept
// once: the open loop that offers a load at a fixed rate (pace, offerLoad),
// the WebSocket follower that keeps a user's socket up and times pushes
// (followAll), the pipeline of database, kfake and fanout, and the report
// (`inboxd-bench all`: the goals, the ranges over several runs and
// docs/benchmarks.md between its marker comments). The charts are drawn by
// the chart package.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// Row is one line of a result table: a figure, its reference from the same
// run and their ratio.
type Row struct {
	Figure    string `json:"figure"`
	Value     string `json:"value"`
	Reference string `json:"reference"`
	Ratio     string `json:"ratio"`
}

// Result is what every figure returns: its rows and itself as JSON.
type Result interface {
	Rows() []Row
}

// WriteTable writes rows as a Markdown table (it reads as plain text too).
func WriteTable(w io.Writer, rows []Row) {
	fmt.Fprintf(w, "| figure | value | reference (same run) | ratio |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", cell(r.Figure), cell(r.Value), cell(r.Reference), cell(r.Ratio))
	}
}

func cell(s string) string {
	if s == "" {
		return " "
	}
	return strings.ReplaceAll(s, "|", "\\|")
}

// WriteOutputs writes res as JSON to jsonPath and its table as Markdown to
// mdPath; an empty path is skipped.
func WriteOutputs(res Result, jsonPath, mdPath string) error {
	if jsonPath != "" {
		raw, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonPath, append(raw, '\n'), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", jsonPath, err)
		}
	}
	if mdPath != "" {
		var b strings.Builder
		WriteTable(&b, res.Rows())
		if err := os.WriteFile(mdPath, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", mdPath, err)
		}
	}
	return nil
}

// ratio formats a/b, or "n/a" when b is zero.
func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "n/a"
	}
	r := a / b
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f", r)
	case r >= 10:
		return fmt.Sprintf("%.1f", r)
	case r >= 0.1:
		return fmt.Sprintf("%.2f", r)
	default:
		return fmt.Sprintf("%.3f", r)
	}
}

// setDefault sets *v to d when it is zero: the configs' zero fields
// take the defaults their comments give.
func setDefault[T int | float64](v *T, d T) {
	if *v == 0 {
		*v = d
	}
}

// div is a/b, 0 when b is 0.
func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// num formats a count or rate with thousands separators.
func num(v float64) string {
	neg := v < 0
	if neg {
		v = -v
	}
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// ms formats milliseconds with a precision that suits their size.
func ms(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.2f ms", v)
	}
}

// bytesPer formats a byte count per unit.
func bytesPer(v float64) string {
	switch {
	case v >= 10<<10:
		return fmt.Sprintf("%.1f KiB", v/1024)
	default:
		return fmt.Sprintf("%.0f B", v)
	}
}

// progressf writes one progress line.
func progressf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
