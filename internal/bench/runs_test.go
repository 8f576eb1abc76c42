package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeRun is a result of bench all with every figure behind the goals,
// its numbers scaled by k: what the goals and the ranges are computed
// from, without a measurement.
func fakeRun(k float64) AllResult {
	dist := func(p50, p99 float64) Dist { return Dist{N: 100, P50: p50, P90: p99 * 0.8, P99: p99, Max: p99 * 2} }
	phase := func(tr string, load, p50, p99 float64) E2EPhase {
		return E2EPhase{Name: "load", Transport: tr, Offered: load, Achieved: load, Sent: int64(load * 10), Created: int64(load * 10),
			Expected: int64(load * 70), Received: int64(load * 70), Push: dist(p50*k, p99*k), Send: dist(p50, p99), Commit: dist(1, 3), Sustained: true}
	}
	shares := []CPUShare{{Group: "PostgreSQL (all its processes)", Seconds: 2 * k, Cores: 0.2 * k},
		{Group: "gateway (child process)", Seconds: 1, Cores: 0.1}, {Group: "fanout + kfake (orchestrator)", Seconds: 1, Cores: 0.1},
		{Group: "load generator (child process)", Seconds: 0.5, Cores: 0.05}}
	return AllResult{
		Started: time.Date(2026, 12, 1, 20, int(k*10), 0, 0, time.UTC), Seconds: 200,
		Fanout7: &FanoutResult{Members: 7, Messages: 1000, RowsPerSec: 140000 * k, CopyRowsPerSec: 350000, IdleP99Ms: 3,
			LiveRecPerSec: 20000, ReplayRecPerSec: 100000 * k},
		Fanout50: &FanoutResult{Members: 50, Messages: 1000, RowsPerSec: 150000 * k, CopyRowsPerSec: 400000, IdleP99Ms: 8},
		E2E: &E2EResult{Members: 7, MaxPhase: 2, MaxSustainable: 7000 * k, DrainSeconds: 3, MaxP99Ms: 500,
			Phases:   []E2EPhase{phase("http", 100, 2.5, 8), phase("http", 1000, 4.5, 11), confirmation(phase("http", 7000*k, 40, 200))},
			WSPhases: []E2EPhase{phase("ws", 100, 2, 6), phase("ws", 1000, 3, 10)},
			CPUPhase: "1,000 msg/s", CPU: shares, CPUMessages: 10000, CPUWSPhase: "1,000 msg/s", CPUWS: shares, CPUWSMessages: 10000},
		Sync: &SyncResult{PageSize: 50, Page: SyncPhase{PerSec: 12000 * k}, NotModified: SyncPhase{PerSec: 40000}, Trivial: SyncPhase{PerSec: 42000}},
	}
}

func confirmation(p E2EPhase) E2EPhase {
	p.Name = finalPhaseName + " 1"
	return p
}

func TestGoalsComputedFromTheResults(t *testing.T) {
	gs := goalsOf(fakeRun(1))
	ids, titles := map[string]Goal{}, map[string]bool{}
	for _, g := range gs {
		ids[g.ID] = g
		require.NotEmpty(t, g.Title, g.ID)
		require.False(t, titles[g.Title], "two goals named %q", g.Title)
		titles[g.Title] = true
		if g.ID == spreadGoalID {
			require.False(t, g.Known, "one run cannot measure the run-to-run range")
			continue
		}
		require.True(t, g.Known, g.ID)
		require.NotEmpty(t, g.Reference, g.ID)
		require.NotEmpty(t, g.ValueText, g.ID)
		require.NotEmpty(t, g.Target.String(), g.ID)
	}
	require.Len(t, gs, 13)
	require.InDelta(t, 7000, ids["sustained"].Value, 1e-9)
	require.InDelta(t, 0.35, ids["sustained"].Ratio, 1e-9)
	require.True(t, ids["sustained"].Met())
	require.True(t, ids["push-p50-http"].Met())
	// p99 11 ms against the commit's 3 ms: under 4x.
	require.InDelta(t, 11.0/3, ids["push-p99-http"].Ratio, 1e-9)
	require.True(t, ids["push-p99-http"].Met())
	require.True(t, ids["push-p99-ws"].Met())
	require.InDelta(t, 2.5, ids["push-p50-low-http"].Value, 1e-9)
	require.True(t, ids["push-p50-low-http"].Met())
	// (2+1+1) s of the server's CPU over 10,000 messages: 400 us/msg, the
	// load generator's 0.5 s not counted.
	require.InDelta(t, 400, ids["cpu-http"].Value, 1e-9)
	require.InDelta(t, 400.0/1599, ids["cpu-http"].Ratio, 1e-9)
	require.True(t, ids["cpu-http"].Met())
	require.InDelta(t, 5, ids["replay"].Ratio, 1e-9)
	require.InDelta(t, 150000.0/400000, ids["fanout50"].Ratio, 1e-9)
	require.InDelta(t, 12000.0/42000, ids["sync"].Ratio, 1e-9)

	slow := goalsOf(fakeRun(0.5))
	for _, g := range slow {
		if g.ID == "replay" || g.ID == "sync" || g.ID == "fanout50" {
			require.False(t, g.Met(), g.ID)
		}
	}
	// Four times the pushes' latency and the database's CPU: the p99 ratio, the
	// low-load p50 and the CPU bound are missed.
	for _, g := range goalsOf(fakeRun(4)) {
		switch g.ID {
		case "push-p99-http", "push-p50-low-http", "cpu-http":
			require.False(t, g.Met(), g.ID)
		}
	}
	// Without PostgreSQL's CPU (DATABASE_URL) the total is no total.
	noPG := fakeRun(1)
	e := *noPG.E2E
	e.CPU = e.CPU[1:]
	noPG.E2E = &e
	for _, g := range goalsOf(noPG) {
		if g.ID == "cpu-http" {
			require.False(t, g.Known)
		}
	}
	var figures []string
	for _, row := range noPG.E2E.Rows() {
		figures = append(figures, row.Figure)
	}
	require.Contains(t, strings.Join(figures, "\n"), "HTTP sends at 1,000 msg/s (10,000 messages): total without PostgreSQL")
	require.NotContains(t, strings.Join(figures, "\n"), "HTTP sends at 1,000 msg/s (10,000 messages): server", "no server figure without PostgreSQL's CPU")
	// A run without the figures: every goal is there, not measured.
	for _, g := range goalsOf(AllResult{}) {
		require.False(t, g.Known, g.ID)
		require.NotEmpty(t, g.Why, g.ID)
	}
	for _, row := range fakeRun(1).Rows() {
		require.NotEmpty(t, row.Reference, row.Figure)
		require.NotEmpty(t, row.Ratio, row.Figure)
	}
}

// Three runs reported together: each figure with the value of every run
// and its range, the goals on the ranges, then the first run's tables.
func TestReportOfSeveralRuns(t *testing.T) {
	runs := []AllResult{fakeRun(1), fakeRun(1.2), fakeRun(0.9)}
	dir := t.TempDir()
	doc := filepath.Join(dir, "benchmarks.md")
	require.NoError(t, os.WriteFile(doc, []byte("# hand\n"+markBegin+"\nold\n"+markEnd+"\nprose\n"+markProfilesBegin+"\n"+markProfilesEnd+"\n"), 0o644))
	require.NoError(t, WriteReports(runs, doc, ""))
	raw, err := os.ReadFile(doc)
	require.NoError(t, err)
	report := string(raw)
	require.NotContains(t, report, "\nold\n")
	require.Contains(t, report, "\nprose\n")
	require.Contains(t, report, "#### Ranges over 3 runs")
	require.Contains(t, report, "| figure | run 1 | run 2 | run 3 | min - max | ± |")
	require.Contains(t, report, "| fan-out, 7 members: committed inbox rows/s | 140,000 rows/s | 168,000 rows/s | 126,000 rows/s | 126,000 rows/s - 168,000 rows/s | 14% |")
	require.Contains(t, report, "WebSocket send -> push p99 at 1,000 msg/s")
	require.Contains(t, report, "CPU per message, HTTP sends at 1,000 msg/s: total")
	// The highest sustained load is 7,000 * k msg/s: met in all; the push
	// p99 over the commit's is 11/3 * k: met in 2 of 3; replay / live is
	// 5 * k: met in all.
	require.Regexp(t, `highest sustained load .*\| 6,300 msg/s - 8,400 msg/s \| >= 2000 msg/s \| \*\*met in all 3 runs\*\* \|`, report)
	require.Regexp(t, `send -> push p99 at 1,000 msg/s, HTTP sends .*\| ratio 3\.30 - 4\.40 \| ratio < 4\.00 \| met in 2 of 3 runs \|`, report)
	require.Regexp(t, `replay / the live .*\| ratio 4\.50 - 6\.00 \| ratio >= 3\.00 \| \*\*met in all 3 runs\*\* \|`, report)
	require.Regexp(t, `run-to-run range .*135,000 - 180,000 rows/s: ±14% \| <= 15 % \| \*\*met\*\* \(over 3 runs\)`, report)
	require.Contains(t, report, "| HTTP send -> push p99 at the highest sustained load | 200 ms | 240 ms | 180 ms |")
	require.NotContains(t, report, "at 8,400 msg/s |", "a load that moves from run to run is no row of its own")
	// A fixed load that was the highest sustained stays in its own row.
	runs[1].E2E.MaxPhase = 1
	require.Contains(t, renderRanges(runs), "| HTTP send -> push p99 at 1,000 msg/s | 11.0 ms | 13.2 ms | 9.90 ms |")
	require.Contains(t, report, "#### The full run: run 1")
	require.Contains(t, report, "#### Goals\n")
	require.Equal(t, 1, strings.Count(report, "#### Fan-out (`inboxd-bench fanout`)"), "the full tables once, of run 1")

	one := Summary(runs[:1])
	require.Contains(t, one, "| goal | figure | value | reference | ratio | target | met |")
	require.Contains(t, one, "needs several runs")
}
