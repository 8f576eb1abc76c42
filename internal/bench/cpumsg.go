package bench

import (
	"fmt"
	"strings"
)

// cpuBaseline is the reference of the CPU per message: not a figure of the
// same run but the run recorded before the work on halving it began,
// because the goal is half of what the server took then. It is fixed on
// purpose: the ratio says how far the code has moved from that run, on
// this machine. Centrifugo is the server CPU per message of a durable
// Centrifugo (its PostgreSQL outbox consumer) measured on the same machine
// in the same hour, the figure the goal is set against.
var cpuBaseline = cpuReference{
	Run:   "recorded baseline, not this run (the run of 2026-12-04)",
	Total: 1829,
	Groups: map[string]float64{
		cpuGroupPostgreSQL:    736,
		cpuGroupGateway:       631,
		cpuGroupFanout:        232,
		cpuGroupLoadGenerator: 230,
	},
	Centrifugo: 780,
}

type cpuReference struct {
	Run        string
	Total      float64            // us of CPU per message, all groups
	Groups     map[string]float64 // us per message, by CPUShare.Group
	Centrifugo float64
}

// Server is the baseline's CPU per message without the load generator.
func (c cpuReference) Server() float64 { return c.Total - c.Groups[cpuGroupLoadGenerator] }

// The CPU groups of the e2e figure.
const (
	cpuGroupGateway       = "gateway (child process)"
	cpuGroupFanout        = "fanout + kfake (orchestrator)"
	cpuGroupLoadGenerator = "load generator (child process)"
)

// serverPerMessage is usPerMessage of every group but the load generator.
func serverPerMessage(shares []CPUShare, msgs int64) (server float64, by map[string]float64) {
	total, by := usPerMessage(shares, msgs)
	return total - by[cpuGroupLoadGenerator], by
}

// cpuGroupPostgreSQL is the CPU group of PostgreSQL's processes, measured
// only on the run's private server (not with DATABASE_URL).
const cpuGroupPostgreSQL = "PostgreSQL (all its processes)"

// hasGroup says whether shares measured group.
func hasGroup(shares []CPUShare, group string) bool {
	for _, c := range shares {
		if c.Group == group {
			return true
		}
	}
	return false
}

// usPerMessage is the CPU of shares in microseconds per message: their CPU
// seconds over the phase (drain included) divided by the messages the phase
// sent, the same as cores / achieved msg/s up to the drain.
func usPerMessage(shares []CPUShare, msgs int64) (total float64, by map[string]float64) {
	by = map[string]float64{}
	if msgs <= 0 {
		return 0, by
	}
	for _, c := range shares {
		by[c.Group] = c.Seconds * 1e6 / float64(msgs)
		total += by[c.Group]
	}
	return total, by
}

// cpuPerMessageRows are the CPU rows of a phase: each group's CPU in
// microseconds per message, then the total, each next to the recorded
// baseline. Without the message count (a result of an older harness) they
// are the groups' cores next to the total, as that harness reported them.
func cpuPerMessageRows(phase string, shares []CPUShare, msgs int64) []Row {
	if len(shares) == 0 {
		return nil
	}
	var cores float64
	for _, c := range shares {
		cores += c.Cores
	}
	var rows []Row
	if msgs <= 0 {
		for _, c := range shares {
			rows = append(rows, Row{
				Figure:    fmt.Sprintf("CPU during e2e, %s: %s", phase, c.Group),
				Value:     fmt.Sprintf("%.2f cores", c.Cores),
				Reference: fmt.Sprintf("all measured processes: %.2f cores", cores),
				Ratio:     ratio(c.Cores, cores),
			})
		}
		return rows
	}
	total, by := usPerMessage(shares, msgs)
	add := func(group string, us, c, base float64) {
		row := Row{
			Figure:    fmt.Sprintf("CPU per message, %s (%s messages): %s", phase, num(float64(msgs)), group),
			Value:     fmt.Sprintf("%s us/msg (%.2f cores)", num(us), c),
			Reference: fmt.Sprintf("%s: %s us/msg", cpuBaseline.Run, num(base)),
			Ratio:     ratio(us, base),
		}
		if base == 0 {
			row.Reference = cpuBaseline.Run + ": no figure for this group"
		}
		rows = append(rows, row)
	}
	for _, c := range shares {
		add(c.Group, by[c.Group], c.Cores, cpuBaseline.Groups[c.Group])
	}
	if hasGroup(shares, cpuGroupPostgreSQL) {
		if hasGroup(shares, cpuGroupLoadGenerator) {
			var lg float64
			for _, c := range shares {
				if c.Group == cpuGroupLoadGenerator {
					lg = c.Cores
				}
			}
			add("server (all but the load generator)", total-by[cpuGroupLoadGenerator], cores-lg, cpuBaseline.Server())
		}
		add("total", total, cores, cpuBaseline.Total)
	} else {
		add("total without PostgreSQL (not measured: the run's server is not its own)", total, cores,
			cpuBaseline.Total-cpuBaseline.Groups[cpuGroupPostgreSQL])
	}
	return rows
}

// cpuGroupShort names a CPU group in a few words, for the ranges table.
func cpuGroupShort(group string) string {
	if i := strings.Index(group, " ("); i > 0 {
		return group[:i]
	}
	return group
}
