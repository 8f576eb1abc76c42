package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// The performance goals of the path through the gateway, each computed
// from the results of a run (never written by hand): the figure, its
// reference, their ratio, the target and whether the run meets it.
// goalsOf lists them in a fixed order, the report's.

// goalLoad is the offered load of the latency and CPU goals, msg/s.
const goalLoad = 1000

// target is what a goal asks of its figure: Op ("<", "<=" or ">=") Bound,
// on the ratio when OnRatio, else on the value.
type target struct {
	OnRatio bool
	Op      string
	Bound   float64
	Unit    string // of the value, when not OnRatio
}

func (t target) String() string {
	if t.OnRatio {
		return fmt.Sprintf("ratio %s %s", t.Op, ratio(t.Bound, 1))
	}
	return fmt.Sprintf("%s %g %s", t.Op, t.Bound, t.Unit)
}

func (t target) met(v float64) bool {
	switch t.Op {
	case "<":
		return v < t.Bound
	case "<=":
		return v <= t.Bound
	case ">=":
		return v >= t.Bound
	}
	return false
}

// Goal is one goal as one run measured it.
type Goal struct {
	ID    string // the same in every run
	Title string // the goal's short name, the same in every run
	Name  string // the figure it is read on, with what the run measured it on
	// Known is false when the figure behind the goal did not run; Why
	// says what is missing.
	Known bool
	Why   string
	Value float64
	Ratio float64 // NaN: no ratio (no reference number)
	// ValueText and Reference are the value and the reference as the
	// figure's row shows them.
	ValueText string
	Reference string
	Target    target
	format    func(float64) string // of Value, for the ranges
}

// compared is the number the target applies to.
func (g Goal) compared() float64 {
	if g.Target.OnRatio {
		return g.Ratio
	}
	return g.Value
}

// Met says whether the run meets the goal (false when not measured).
func (g Goal) Met() bool {
	return g.Known && !math.IsNaN(g.compared()) && g.Target.met(g.compared())
}

func (g Goal) verdict() string {
	switch {
	case !g.Known:
		return "not measured"
	case g.Met():
		return "**met**"
	}
	return "not met"
}

// fixedPhase returns the fixed load of phases at goalLoad msg/s, else the
// last fixed one (a run with other loads); ok is false when there is none.
func fixedPhase(phases []E2EPhase) (E2EPhase, bool) {
	return phaseAt(phases, goalLoad, func(E2EPhase, E2EPhase) bool { return true })
}

// phaseAt returns the fixed load (not the ramp's) of phases at load msg/s,
// else the fixed one that prefer picks (prefer(p, best): p replaces the
// best so far); ok is false when there is none.
func phaseAt(phases []E2EPhase, load float64, prefer func(p, best E2EPhase) bool) (E2EPhase, bool) {
	var best E2EPhase
	ok := false
	for _, p := range phases {
		if strings.HasPrefix(p.Name, finalPhaseName) {
			continue
		}
		if p.Offered == load {
			return p, true
		}
		if !ok || prefer(p, best) {
			best, ok = p, true
		}
	}
	return best, ok
}

func fmtRatio(v float64) string { return ratio(v, 1) }

// goalsOf computes every goal from the results of one run.
func goalsOf(r AllResult) []Goal {
	gs := []Goal{sustainedGoal(r)}
	gs = append(gs, pushGoals(r)...)
	gs = append(gs, cpuGoals(r)...)
	return append(gs, fanoutGoals(r)...)
}

// missingGoal is a goal before its figure is known.
func missingGoal(id, title, name, why string, t target) Goal {
	return Goal{ID: id, Title: title, Name: name, Why: why, Ratio: math.NaN(), Target: t}
}

// sustainedGoal: the highest sustained load through the gateway, in
// msg/s, next to the fan-out alone (in inbox rows/s, the ratio).
func sustainedGoal(r AllResult) Goal {
	g := missingGoal("sustained", "gateway throughput", "highest sustained load through the gateway (7 members, HTTP sends), msg/s; ratio: its inbox rows/s / the fan-out alone",
		"needs the e2e and fanout figures", target{Op: ">=", Bound: 2000, Unit: "msg/s"})
	if e := r.E2E; e != nil && e.MaxSustainable > 0 {
		v := e.MaxSustainable * float64(e.Members)
		g.Known, g.Value = true, e.MaxSustainable
		g.ValueText = fmt.Sprintf("%s msg/s = %s inbox rows/s", num(e.MaxSustainable), num(v))
		g.Reference = "fan-out alone: not in this run"
		if f := r.Fanout7; f != nil && f.RowsPerSec > 0 {
			g.Ratio = v / f.RowsPerSec
			g.Reference = fmt.Sprintf("fan-out alone, same run: %s inbox rows/s", num(f.RowsPerSec))
		}
		g.format = func(v float64) string { return num(v) + " msg/s" }
	}
	return g
}

// lowLoad is the offered load of the low-load latency goal, msg/s.
const lowLoad = 100

// lowPhase returns the fixed load of phases at lowLoad msg/s, else the
// lowest fixed one (a run with other loads); ok is false when there is none.
func lowPhase(phases []E2EPhase) (E2EPhase, bool) {
	return phaseAt(phases, lowLoad, func(p, best E2EPhase) bool { return p.Offered < best.Offered })
}

// pushGoals: over HTTP and over the WebSocket, the push p50 at 1,000
// msg/s, its p99 against the bare commit's p99 of the same phase, and the
// push p50 at 100 msg/s.
func pushGoals(r AllResult) []Goal {
	var gs []Goal
	for _, tr := range []struct{ id, label, short string }{{transportHTTP, "HTTP sends", "HTTP"}, {transportWS, "WebSocket sends", "WebSocket"}} {
		var phases []E2EPhase
		if r.E2E != nil {
			phases = r.E2E.Phases
			if tr.id == transportWS {
				phases = r.E2E.WSPhases
			}
		}
		high, highOK := fixedPhase(phases)
		low, lowOK := lowPhase(phases)
		for _, q := range []struct {
			id, name string
			load     float64
			p        E2EPhase
			ok       bool
			at       func(Dist) float64
			t        target
		}{
			{"push-p50-" + tr.id, "p50", goalLoad, high, highOK, func(d Dist) float64 { return d.P50 }, target{Op: "<", Bound: 10, Unit: "ms"}},
			{"push-p99-" + tr.id, "p99", goalLoad, high, highOK, func(d Dist) float64 { return d.P99 }, target{OnRatio: true, Op: "<", Bound: 4}},
			{"push-p50-low-" + tr.id, "p50", lowLoad, low, lowOK, func(d Dist) float64 { return d.P50 }, target{Op: "<", Bound: 3, Unit: "ms"}},
		} {
			g := missingGoal(q.id, fmt.Sprintf("push latency %s at %s msg/s, %s", q.name, num(q.load), tr.short),
				fmt.Sprintf("send -> push %s at %s msg/s, %s", q.name, num(q.load), tr.label),
				"needs the e2e figure with "+tr.label+" at "+num(q.load)+" msg/s", q.t)
			if q.ok && q.p.Push.N > 0 {
				if q.p.Offered != q.load {
					g.Name = fmt.Sprintf("send -> push %s, %s, measured at %s msg/s (the goal's load: %s)", q.name, tr.label, num(q.p.Offered), num(q.load))
				}
				g.Known, g.Value, g.Ratio = true, q.at(q.p.Push), q.at(q.p.Push)/q.at(q.p.Commit)
				g.ValueText = ms(g.Value)
				g.Reference = fmt.Sprintf("single-row INSERT+COMMIT round trip, same time: %s", ms(q.at(q.p.Commit)))
				g.format = ms
			}
			gs = append(gs, g)
		}
	}
	return gs
}

// cpuGoalBound is the server's CPU per message the goal allows, us: half
// of the recorded baseline's server share, at or below what a durable
// Centrifugo took on the same machine (cpuBaseline.Centrifugo).
const cpuGoalBound = 800

// cpuGoals: the server's CPU per message (every measured process but the
// load generator) over HTTP and over the WebSocket, against the recorded
// baseline's.
func cpuGoals(r AllResult) []Goal {
	var gs []Goal
	for _, tr := range []struct{ id, label, short string }{{transportHTTP, "HTTP sends", "HTTP"}, {transportWS, "WebSocket sends", "WebSocket"}} {
		g := missingGoal("cpu-"+tr.id, "server CPU per message, "+tr.short,
			fmt.Sprintf("server CPU per message at %s msg/s, %s (PostgreSQL + gateway + fanout and kfake; not the load generator) / the recorded baseline's", num(goalLoad), tr.label),
			"needs the e2e figure with "+tr.label+" (and its message count)", target{Op: "<=", Bound: cpuGoalBound, Unit: "us/msg"})
		if e := r.E2E; e != nil {
			shares, msgs, phase := e.CPU, e.CPUMessages, e.CPUPhase
			if tr.id == transportWS {
				shares, msgs, phase = e.CPUWS, e.CPUWSMessages, e.CPUWSPhase
			}
			server, by := serverPerMessage(shares, msgs)
			switch {
			case server > 0 && !hasGroup(shares, cpuGroupPostgreSQL):
				g.Why = "PostgreSQL's CPU is measured only on the run's private server (not with DATABASE_URL)"
			case server > 0:
				if phase != num(goalLoad)+" msg/s" {
					g.Name = fmt.Sprintf("server CPU per message, %s, measured at %s (the goal's load: %s msg/s) / the recorded baseline's", tr.label, phase, num(goalLoad))
				}
				g.Known, g.Value, g.Ratio = true, server, server/cpuBaseline.Server()
				g.ValueText = fmt.Sprintf("%s us/msg (PostgreSQL %s, gateway %s, fanout + kfake %s)", num(server),
					num(by[cpuGroupPostgreSQL]), num(by[cpuGroupGateway]), num(by[cpuGroupFanout]))
				g.Reference = fmt.Sprintf("%s: %s us/msg; a durable Centrifugo on the same machine: %s", cpuBaseline.Run, num(cpuBaseline.Server()), num(cpuBaseline.Centrifugo))
				g.format = func(v float64) string { return num(v) + " us/msg" }
			}
		}
		gs = append(gs, g)
	}
	return gs
}

// fanoutGoals: the fan-out with 50 members vs COPY and its run-to-run
// range (several runs only), replay vs live, sync pages vs the trivial
// handler.
func fanoutGoals(r AllResult) []Goal {
	f50 := missingGoal("fanout50", "fan-out speed", "fan-out, 50 members / a plain COPY of the same rows", "needs the fanout figure",
		target{OnRatio: true, Op: ">=", Bound: 0.35})
	if f := r.Fanout50; f != nil && f.CopyRowsPerSec > 0 {
		f50.Known, f50.Value, f50.Ratio = true, f.RowsPerSec, f.RowsPerSec/f.CopyRowsPerSec
		f50.ValueText = num(f.RowsPerSec) + " rows/s"
		f50.Reference = fmt.Sprintf("COPY, same run: %s rows/s", num(f.CopyRowsPerSec))
		f50.format = func(v float64) string { return num(v) + " rows/s" }
	}
	spr := missingGoal(spreadGoalID, "fan-out steadiness", "fan-out, 50 members: run-to-run range of its rows/s, ± around the middle of min and max",
		"needs several runs: inboxd-bench report --from a.json --from b.json --from c.json", target{Op: "<=", Bound: 15, Unit: "%"})
	rep := missingGoal("replay", "replay speed", "replay / the live fan-out of the same log (7 members), records/s", "needs the fanout figure with replay",
		target{OnRatio: true, Op: ">=", Bound: 3})
	if f := r.Fanout7; f != nil && f.ReplayRecPerSec > 0 && f.LiveRecPerSec > 0 {
		rep.Known, rep.Value, rep.Ratio = true, f.ReplayRecPerSec, f.ReplayRecPerSec/f.LiveRecPerSec
		rep.ValueText = num(f.ReplayRecPerSec) + " records/s"
		rep.Reference = fmt.Sprintf("live, same run: %s records/s", num(f.LiveRecPerSec))
		rep.format = func(v float64) string { return num(v) + " records/s" }
	}
	syn := missingGoal("sync", "sync page cost", "sync pages/s / the trivial handler on the same server", "needs the sync figure",
		target{OnRatio: true, Op: ">=", Bound: 0.25})
	if s := r.Sync; s != nil && s.Trivial.PerSec > 0 {
		syn.Known, syn.Value, syn.Ratio = true, s.Page.PerSec, s.Page.PerSec/s.Trivial.PerSec
		syn.ValueText = num(s.Page.PerSec) + " pages/s"
		syn.Reference = fmt.Sprintf("trivial handler, same run: %s req/s", num(s.Trivial.PerSec))
		syn.format = func(v float64) string { return num(v) + " pages/s" }
	}
	return []Goal{f50, spr, rep, syn}
}

// spreadGoalID is the goal only several runs measure.
const spreadGoalID = "fanout50-range"

func ratioText(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmtRatio(v)
}

// goalRows are the goals as rows of the result table.
func goalRows(gs []Goal) []Row {
	var rows []Row
	for _, g := range gs {
		row := Row{Figure: "goal, " + g.Title + ": " + g.Name, Value: g.ValueText, Reference: g.Reference,
			Ratio: fmt.Sprintf("%s (target %s: %s)", ratioText(g.Ratio), g.Target, strings.Trim(g.verdict(), "*"))}
		if !g.Known {
			row.Value, row.Reference = "not measured", g.Why
		}
		rows = append(rows, row)
	}
	return rows
}

// writeGoals writes the goals of one run as a Markdown table.
func writeGoals(w io.Writer, gs []Goal) {
	fmt.Fprintf(w, "| goal | figure | value | reference | ratio | target | met |\n|---|---|---|---|---|---|---|\n")
	for _, g := range gs {
		if !g.Known {
			fmt.Fprintf(w, "| %s | %s | not measured | %s | | %s | %s |\n", cell(g.Title), cell(g.Name), cell(g.Why), g.Target, g.verdict())
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", cell(g.Title), cell(g.Name), cell(g.ValueText), cell(g.Reference), ratioText(g.Ratio), g.Target, g.verdict())
	}
}
