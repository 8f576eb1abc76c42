package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// Several runs of `bench all` (each its own JSON, written by `all --json`)
// reported together: the figures that move, the value of each run and
// their range, and the goals on those ranges. The full tables are those of
// the first run; nothing is averaged, no run is dropped.

// metric is one number of a run that the ranges follow; Key is the same
// in every run with the same configuration.
type metric struct {
	Key    string
	Name   string
	Value  float64
	Format func(float64) string
}

func perSec(unit string) func(float64) string {
	return func(v float64) string { return num(v) + " " + unit }
}

// metricsOf lists the figures of r that move from run to run: the
// fan-out, the e2e latencies, highest load and CPU, the sync rates. The
// idle and storm figures are left to the full run's tables.
func metricsOf(r AllResult) []metric {
	var out []metric
	add := func(key, name string, v float64, f func(float64) string) {
		if v > 0 && !math.IsNaN(v) && !math.IsInf(v, 0) {
			out = append(out, metric{key, name, v, f})
		}
	}
	for _, f := range []*FanoutResult{r.Fanout7, r.Fanout50} {
		if f == nil {
			continue
		}
		k := fmt.Sprintf("fanout%d", f.Members)
		add(k, fmt.Sprintf("fan-out, %d members: committed inbox rows/s", f.Members), f.RowsPerSec, perSec("rows/s"))
		add(k+"-copy", fmt.Sprintf("fan-out, %d members: reference, COPY rows/s", f.Members), f.CopyRowsPerSec, perSec("rows/s"))
		add(k+"-ratio", fmt.Sprintf("fan-out, %d members / COPY", f.Members), div(f.RowsPerSec, f.CopyRowsPerSec), fmtRatio)
		add(k+"-idle-p99", fmt.Sprintf("idle fan-out, %d members: append -> NOTIFY p99", f.Members), f.IdleP99Ms, ms)
		add(k+"-replay", fmt.Sprintf("replay, %d members: records/s", f.Members), f.ReplayRecPerSec, perSec("records/s"))
		add(k+"-live", fmt.Sprintf("replay, %d members: reference, live records/s", f.Members), f.LiveRecPerSec, perSec("records/s"))
		add(k+"-replay-ratio", fmt.Sprintf("replay / live, %d members", f.Members), div(f.ReplayRecPerSec, f.LiveRecPerSec), fmtRatio)
	}
	if e := r.E2E; e != nil {
		for _, tr := range []struct {
			id, label string
			phases    []E2EPhase
		}{{transportHTTP, "HTTP send", e.Phases}, {transportWS, "WebSocket send", e.WSPhases}} {
			for _, p := range tr.phases {
				if strings.HasPrefix(p.Name, finalPhaseName) {
					continue // its load moves from run to run: the highest sustained, below
				}
				k := fmt.Sprintf("e2e-%s-%g", tr.id, p.Offered)
				at := fmt.Sprintf("at %s msg/s", num(p.Offered))
				add(k+"-p50", fmt.Sprintf("%s -> push p50 %s", tr.label, at), p.Push.P50, ms)
				add(k+"-p99", fmt.Sprintf("%s -> push p99 %s", tr.label, at), p.Push.P99, ms)
				add(k+"-send-p99", fmt.Sprintf("%s round trip (answered once projected) p99 %s", tr.label, at), p.Send.P99, ms)
				add(k+"-commit-p99", fmt.Sprintf("reference during the %ss %s: single-row commit p99", tr.label, at), p.Commit.P99, ms)
			}
		}
		add("e2e-max", "highest sustained load through the gateway, msg/s", e.MaxSustainable, perSec("msg/s"))
		if e.MaxPhase >= 0 && e.MaxPhase < len(e.Phases) {
			add("e2e-max-p99", "HTTP send -> push p99 at the highest sustained load", e.Phases[e.MaxPhase].Push.P99, ms)
		}
		if r.Fanout7 != nil {
			add("e2e-max-ratio", "highest sustained load / fan-out alone (inbox rows/s)",
				div(e.MaxSustainable*float64(e.Members), r.Fanout7.RowsPerSec), fmtRatio)
		}
		us := func(v float64) string { return num(v) + " us/msg" }
		for _, c := range []struct {
			id, label string
			shares    []CPUShare
			msgs      int64
		}{{transportHTTP, "HTTP sends at " + e.CPUPhase, e.CPU, e.CPUMessages}, {transportWS, "WebSocket sends at " + e.CPUWSPhase, e.CPUWS, e.CPUWSMessages}} {
			total, by := usPerMessage(c.shares, c.msgs)
			for _, s := range c.shares {
				add("cpu-"+c.id+"-"+cpuGroupShort(s.Group), fmt.Sprintf("CPU per message, %s: %s", c.label, cpuGroupShort(s.Group)), by[s.Group], us)
			}
			if hasGroup(c.shares, cpuGroupPostgreSQL) && hasGroup(c.shares, cpuGroupLoadGenerator) {
				add("cpu-"+c.id+"-server", fmt.Sprintf("CPU per message, %s: server (all but the load generator)", c.label), total-by[cpuGroupLoadGenerator], us)
			}
			add("cpu-"+c.id+"-total", fmt.Sprintf("CPU per message, %s: total", c.label), total, us)
		}
	}
	if s := r.Sync; s != nil {
		add("sync-pages", "sync pages/s", s.Page.PerSec, perSec("pages/s"))
		add("sync-trivial", "sync: reference, trivial handler req/s", s.Trivial.PerSec, perSec("req/s"))
		add("sync-ratio", "sync pages / trivial handler", div(s.Page.PerSec, s.Trivial.PerSec), fmtRatio)
		add("sync-304-ratio", "sync 304s / trivial handler", div(s.NotModified.PerSec, s.Trivial.PerSec), fmtRatio)
	}
	return out
}

// spread is (max - min) / (max + min): the ± of the range around its middle.
func spread(lo, hi float64) float64 { return div(hi-lo, hi+lo) }

func minMax(vs []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

// rangesNote says how the ranges are made, in the generated text.
const rangesNote = "Each run is a separate `inboxd-bench all --json runN.json`; `inboxd-bench report --from run1.json --from run2.json --from run3.json` wrote this block. Every figure that moves is listed with its value in each run, their min - max and the spread ± (max - min) / (max + min) around the middle of the range; nothing is averaged and no run is left out. A goal is met in a run when that run's own figure meets its target; the fan-out's run-to-run range is the one goal measured over the runs. The full tables further down, the charts and the profiles are those of run 1."

// renderRanges is the generated text of several runs: the runs, the goals
// on their ranges and the figures that move.
func renderRanges(runs []AllResult) string {
	var b strings.Builder
	n := len(runs)
	fmt.Fprintf(&b, "#### Ranges over %d runs\n\n%s\n\n", n, rangesNote)
	for i, r := range runs {
		fmt.Fprintf(&b, "- run %d: %s UTC, %.1f minutes, load average (1 min) %.2f at the start, at most %.2f", i+1,
			r.Started.Format("2006-01-02 15:04"), r.Seconds/60, r.LoadAtStart, r.LoadMax)
		if len(r.Errors) > 0 {
			fmt.Fprintf(&b, ", %d figure(s) failed", len(r.Errors))
		}
		b.WriteString("\n")
	}
	head := func(first []string, rest ...string) {
		cols := append([]string{}, first...)
		for i := range runs {
			cols = append(cols, fmt.Sprintf("run %d", i+1))
		}
		cols = append(cols, rest...)
		fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	}
	b.WriteString("\n")
	writeGoalRanges(&b, runs, head)
	b.WriteString("\n")
	head([]string{"figure"}, "min - max", "±")
	var order []string
	byKey := map[string][]*metric{}
	for i, r := range runs {
		for _, m := range metricsOf(r) {
			if _, ok := byKey[m.Key]; !ok {
				order = append(order, m.Key)
				byKey[m.Key] = make([]*metric, n)
			}
			byKey[m.Key][i] = &m
		}
	}
	for _, k := range order {
		var cols []string
		var vs []float64
		var first *metric
		for _, m := range byKey[k] {
			if m == nil {
				cols = append(cols, "-")
				continue
			}
			first = cmpOr(first, m)
			cols = append(cols, m.Format(m.Value))
			vs = append(vs, m.Value)
		}
		lo, hi := minMax(vs)
		fmt.Fprintf(&b, "| %s | %s | %s - %s | %.0f%% |\n", cell(first.Name), strings.Join(cols, " | "),
			first.Format(lo), first.Format(hi), spread(lo, hi)*100)
	}
	return b.String()
}

func cmpOr(a, b *metric) *metric {
	if a != nil {
		return a
	}
	return b
}

// writeGoalRanges writes the goals of every run: each run's figure, the
// range of the ratio (or of the value, for a target on the value), and in
// how many runs the goal was met.
func writeGoalRanges(b *strings.Builder, runs []AllResult, head func([]string, ...string)) {
	head([]string{"goal", "figure"}, "range of the compared figure", "target", "met")
	per := make([][]Goal, len(runs))
	for i, r := range runs {
		per[i] = goalsOf(r)
	}
	for gi, g0 := range per[0] {
		if g0.ID == spreadGoalID {
			writeSpreadGoal(b, runs, g0)
			continue
		}
		var cols []string
		var vs []float64
		met, known := 0, 0
		for i := range runs {
			g := per[i][gi]
			if !g.Known {
				cols = append(cols, "not measured")
				continue
			}
			known++
			if g.Met() {
				met++
			}
			c := g.ValueText
			if !math.IsNaN(g.Ratio) {
				c += " (ratio " + fmtRatio(g.Ratio) + ")"
			}
			cols = append(cols, c)
			vs = append(vs, g.compared())
		}
		rng := "n/a"
		if len(vs) > 0 {
			lo, hi := minMax(vs)
			f := fmtRatio
			if !g0.Target.OnRatio && g0.format != nil {
				f = g0.format
			}
			rng = f(lo) + " - " + f(hi)
			if g0.Target.OnRatio {
				rng = "ratio " + rng
			}
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", cell(g0.Title), cell(g0.Name), strings.Join(cols, " | "), rng, g0.Target, metCount(met, known, len(runs)))
	}
}

// writeSpreadGoal writes the run-to-run range of the 50-member fan-out.
func writeSpreadGoal(b *strings.Builder, runs []AllResult, g Goal) {
	var cols []string
	var vs []float64
	for _, r := range runs {
		if f := r.Fanout50; f != nil && f.RowsPerSec > 0 {
			cols = append(cols, num(f.RowsPerSec)+" rows/s")
			vs = append(vs, f.RowsPerSec)
			continue
		}
		cols = append(cols, "not measured")
	}
	rng, verdict := "n/a", "not measured (needs 2 runs)"
	if len(vs) >= 2 {
		lo, hi := minMax(vs)
		s := spread(lo, hi) * 100
		rng = fmt.Sprintf("%s - %s rows/s: ±%.0f%%", num(lo), num(hi), s)
		verdict = "not met"
		if g.Target.met(s) {
			verdict = "**met**"
		}
		verdict += fmt.Sprintf(" (over %d runs)", len(vs))
	}
	fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", cell(g.Title), cell(g.Name), strings.Join(cols, " | "), rng, g.Target, verdict)
}

func metCount(met, known, runs int) string {
	switch {
	case known == 0:
		return "not measured"
	case met == known && known == runs:
		return fmt.Sprintf("**met in all %d runs**", runs)
	case met == 0:
		return fmt.Sprintf("not met in any of %d runs", known)
	}
	s := fmt.Sprintf("met in %d of %d runs", met, known)
	if known < runs {
		s += fmt.Sprintf(" (measured in %d of %d)", known, runs)
	}
	return s
}

// WriteReports is WriteReport for one run or more: with several, the
// generated block starts with the ranges over the runs (renderRanges),
// followed by the full tables of the first run; the charts and the
// profiles are those of the first run.
func WriteReports(runs []AllResult, docs, images string) error {
	if len(runs) == 0 {
		return fmt.Errorf("no run to report")
	}
	if len(runs) == 1 {
		return WriteReport(&runs[0], docs, images)
	}
	first := &runs[0]
	if images != "" {
		charts, err := writeCharts(*first, images)
		first.Charts = charts
		if err != nil {
			return fmt.Errorf("charts: %w", err)
		}
	}
	if docs == "" {
		return nil
	}
	raw, err := os.ReadFile(docs)
	if err != nil {
		return err
	}
	text := renderRanges(runs) + "\n#### The full run: run 1\n\n" + renderTables(*first, first.Charts, filepath.Dir(docs), true)
	raw, err = replaceBlock(raw, markBegin, markEnd, text)
	if err != nil {
		return fmt.Errorf("%s: %w", docs, err)
	}
	if len(first.Profiles()) > 0 {
		if raw, err = replaceBlock(raw, markProfilesBegin, markProfilesEnd, renderProfiles(*first)); err != nil {
			return fmt.Errorf("%s: %w", docs, err)
		}
	}
	return os.WriteFile(docs, raw, 0o644)
}

// Summary is the goals of one run, or the ranges of several, as Markdown.
func Summary(runs []AllResult) string {
	if len(runs) == 1 {
		var b strings.Builder
		writeGoals(&b, goalsOf(runs[0]))
		return b.String()
	}
	return renderRanges(runs)
}
