package bench

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/inboxd/inboxd/internal/bench/chart"
)

// The report's generated blocks lie between these marker comments; the
// prose around them is written by hand.
const (
	markBegin         = "<!-- bench:begin -->"
	markEnd           = "<!-- bench:end -->"
	markProfilesBegin = "<!-- bench:profiles:begin -->"
	markProfilesEnd   = "<!-- bench:profiles:end -->"
)

// e2eChart is the latency percentile chart of the e2e phases, each next
// to the commit latency measured at the same time.
func e2eChart(r E2EResult) chart.Line {
	ch := chart.Line{
		Title:  fmt.Sprintf("Send -> WebSocket push, %d members (dashed: a 1-row commit, same time)", r.Members),
		XLabel: "percentile", YLabel: "latency (ms)", LogY: true,
		XTicks: []chart.Tick{{V: 0, Label: "0%"}, {V: math.Log10(2), Label: "50%"}, {V: 1, Label: "90%"}, {V: 2, Label: "99%"}, {V: 3, Label: "99.9%"}},
	}
	k := 0
	for i, p := range r.Phases {
		if strings.HasPrefix(p.Name, finalPhaseName) && i != r.MaxPhase {
			continue // a failed try at the highest load: in the table only
		}
		col := chart.Palette[k%len(chart.Palette)]
		k++
		label := fmt.Sprintf("push at %s msg/s", num(p.Offered))
		if i == r.MaxPhase {
			label += " (highest sustained)"
		}
		ch.Series = append(ch.Series, percentileSeries(label, p.Push, col, false),
			percentileSeries(fmt.Sprintf("commit during %s msg/s", num(p.Offered)), p.Commit, col, true))
	}
	return ch
}

func percentileSeries(name string, d Dist, col color.RGBA, dash bool) chart.Series {
	s := chart.Series{Name: name, Color: col, Dash: dash}
	for i, q := range cdfQuantiles {
		if q >= 1 || i >= len(d.CDF) {
			continue
		}
		s.X = append(s.X, -math.Log10(1-q))
		s.Y = append(s.Y, d.CDF[i])
	}
	return s
}

// stormChart is the request rate (or the clients up) over time, both
// kinds of client on one chart, with the gateway's return marked.
func stormChart(r StormResult, connected bool) chart.Line {
	ch := chart.Line{
		Title:  fmt.Sprintf("Reconnect storm: requests of %s clients, gateway stopped at t = 0", num(float64(r.Clients))),
		XLabel: "seconds since the gateway was stopped",
		YLabel: "requests/s (100 ms buckets)", LogY: true, YMin: 1,
	}
	if connected {
		ch.YLabel, ch.LogY, ch.YMin = "clients connected", false, 0
		ch.Title = fmt.Sprintf("Reconnect storm: %s clients, connected ones, gateway stopped at t = 0", num(float64(r.Clients)))
	}
	for _, run := range r.Runs {
		if len(run.T) > 0 {
			ch.XMin, ch.XMax = run.T[0], max(ch.XMax, run.T[len(run.T)-1])
		}
	}
	for i, run := range r.Runs {
		col := chart.Palette[i%len(chart.Palette)]
		s := chart.Series{Name: stormNames[run.Mode], Color: col, X: run.T}
		if connected {
			for _, c := range run.Connected {
				s.Y = append(s.Y, float64(c))
			}
		} else {
			s.Y = run.Rate
		}
		ch.Series = append(ch.Series, s)
		ch.Marks = append(ch.Marks, chart.Mark{X: run.Downtime, Color: col,
			Label: fmt.Sprintf("gateway back (%s run)", run.Mode)})
	}
	if len(ch.Marks) > 1 {
		// Close together: one label is enough.
		for i := range ch.Marks {
			ch.Marks[i].Label = ""
		}
		ch.Marks[0].Label = "gateway back"
	}
	return ch
}

// renderTables is the generated block of the report: the machine, the
// run and every figure.
func renderTables(r AllResult, charts []string, docDir string, withGoals bool) string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Run of %s UTC, %.1f minutes. Machine: %d CPUs (%s), %.1f GiB of memory, Linux %s, %s, PostgreSQL %s (private server of internal/pgserver, fsync on), kfake in process; open files limit %d.\n",
		r.Started.Format("2006-01-02 15:04"), r.Seconds/60, m.CPUs, m.CPUModel, m.MemoryGiB, m.Kernel, m.Go, m.PostgreSQL, m.OpenFiles)
	fmt.Fprintf(&b, "Load average (1 min) at the start %.2f, at the end %.2f, at most %.2f during the run", r.LoadAtStart, r.LoadAtEnd, r.LoadMax)
	if len(r.LoadByFigure) > 0 {
		var parts []string
		for _, s := range []string{"fanout, 7 members", "fanout, 50 members", "e2e", "sync", "idle", "storm", "changes", "large"} {
			if l, ok := r.LoadByFigure[s]; ok {
				parts = append(parts, fmt.Sprintf("%s %.2f", s, l))
			}
		}
		fmt.Fprintf(&b, " (highest per figure: %s; the suite's own processes count in it)", strings.Join(parts, ", "))
	}
	b.WriteString(".\n")
	if withGoals && r.hasGoals() {
		b.WriteString("\n#### Goals\n\n" + goalsNote + "\n\n")
		writeGoals(&b, goalsOf(r))
	}
	for _, s := range r.sections() {
		fmt.Fprintf(&b, "\n#### %s\n\n", s.Name)
		WriteTable(&b, s.Rows)
	}
	if r.E2E != nil {
		b.WriteString("\nEvery phase of the e2e figure, in the order they ran: the fixed loads with HTTP sends, the same with WebSocket sends, the ramp (short steps, HTTP), and the confirmation of the ramp's highest sustained load over the length of a fixed load (85% of it again if it fails). The send is the HTTP round trip (it answers 201 once the message is projected) or, for the WebSocket sends, the send frame -> its send_ack on the sender's own socket (also once projected); the push is timed at every member, the sender included, in both; fanout busy is the share of the phase the fanout spent applying batches.\n\n" +
			"| phase | offered msg/s | achieved msg/s | push p50 / p99 | send p50 / p99 | commit p50 / p99 | fanout busy | records per batch | verdict |\n|---|---|---|---|---|---|---|---|---|\n")
		// In the order they ran: the fixed loads, the ramp, the final one.
		var phases, final []E2EPhase
		for _, p := range r.E2E.Phases {
			if strings.HasPrefix(p.Name, finalPhaseName) {
				final = append(final, p)
			} else {
				phases = append(phases, p)
			}
		}
		phases = append(append(append(phases, r.E2E.WSPhases...), r.E2E.Ramp...), final...)
		for _, p := range phases {
			fmt.Fprintf(&b, "| %s | %s | %s | %s / %s | %s / %s | %s / %s | %.0f%% | %.1f | %s |\n", p.Name, num(p.Offered), num(p.Achieved),
				ms(p.Push.P50), ms(p.Push.P99), ms(p.Send.P50), ms(p.Send.P99), ms(p.Commit.P50), ms(p.Commit.P99),
				p.FanoutBusy*100, p.FanoutPerBatch, p.verdict(r.E2E.MaxP99Ms))
		}
	}
	if len(charts) > 0 {
		b.WriteString("\n")
		for _, c := range charts {
			rel, err := filepath.Rel(docDir, c)
			if err != nil {
				rel = c
			}
			name := strings.TrimSuffix(filepath.Base(c), ".png")
			fmt.Fprintf(&b, "![%s](%s)\n", name, filepath.ToSlash(rel))
		}
	}
	if len(r.Errors) > 0 {
		b.WriteString("\nFailed in this run:\n\n")
		for n, e := range r.Errors {
			fmt.Fprintf(&b, "- %s: %s\n", n, e)
		}
	}
	return b.String()
}

// goalsNote says how the goals table is made.
const goalsNote = "Computed from this run's results by the report generator (internal/bench/goals.go), never written by hand. The latency and CPU goals are read at the fixed load of 1,000 msg/s (the e2e figure's last fixed load, else said in the goal), the low-load latency at 100 msg/s. The server's CPU per message is the CPU seconds of PostgreSQL, the gateway and the fanout with kfake over that phase (from its first send to the end of its drain) divided by the messages it sent; the load generator is measured and listed but not counted. Its reference is not of this run but the run recorded before the work on halving it began (1,599 us/msg), next to a durable Centrifugo's 780 on the same machine. The fan-out's run-to-run range needs several runs (`inboxd-bench report --from a.json --from b.json --from c.json`)."

// renderProfiles is the generated block of the CPU profiles.
func renderProfiles(r AllResult) string {
	var b strings.Builder
	for _, p := range r.Profiles() {
		if p.Heap {
			fmt.Fprintf(&b, "\n`go tool pprof -top -sample_index=inuse_space` of the %s:\n\n```\n", p.Name)
		} else {
			fmt.Fprintf(&b, "\n`go tool pprof -top` of the %s (%gs of CPU profile):\n\n```\n", p.Name, p.Seconds)
		}
		top := strings.TrimSpace(p.Top)
		if top == "" {
			top = "(no go command to summarise " + filepath.Base(p.Path) + ")"
		}
		b.WriteString(top)
		b.WriteString("\n```\n")
		if cum := strings.TrimSpace(p.TopCum); cum != "" {
			fmt.Fprintf(&b, "\n<details><summary>the same by cumulative time (<code>-top -cum</code>)</summary>\n\n```\n%s\n```\n</details>\n", cum)
		}
	}
	return b.String()
}

// updateReport replaces the generated blocks of the report at path.
func updateReport(path string, r AllResult) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	raw, err = replaceBlock(raw, markBegin, markEnd, renderTables(r, r.Charts, filepath.Dir(path), true))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(r.Profiles()) > 0 {
		raw, err = replaceBlock(raw, markProfilesBegin, markProfilesEnd, renderProfiles(r))
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return os.WriteFile(path, raw, 0o644)
}

func replaceBlock(doc []byte, begin, end, content string) ([]byte, error) {
	i := bytes.Index(doc, []byte(begin))
	j := bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		return nil, fmt.Errorf("no %s ... %s block", begin, end)
	}
	var b bytes.Buffer
	b.Write(doc[:i+len(begin)])
	b.WriteString("\n")
	b.WriteString(strings.TrimSpace(content))
	b.WriteString("\n")
	b.Write(doc[j:])
	return b.Bytes(), nil
}
