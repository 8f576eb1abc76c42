package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat;
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// RaiseOpenFiles raises the soft limit of open files to the hard limit and
// returns the new soft limit. Connection-heavy children call it first.
func RaiseOpenFiles() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, fmt.Errorf("raise open files to %d: %w", lim.Max, err)
		}
	}
	return lim.Cur, nil
}

// rssBytes is the resident set of pid (VmRSS).
func rssBytes(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// cpuSeconds is the user+system CPU time pid has used.
func cpuSeconds(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces; the fields follow its ')'.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTicks
}

// parentOf returns the parent pid of pid, -1 if unknown.
func parentOf(pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return -1
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// postgresPids returns the postmaster whose command line names pgdata and
// its children (the backends, the WAL writer, ...).
func postgresPids(pgdata string) []int {
	if pgdata == "" {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var all []int
	master := -1
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		all = append(all, pid)
		if master < 0 {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if bytes.Contains(cmd, []byte(pgdata)) && bytes.Contains(cmd, []byte("postgres")) {
				master = pid
			}
		}
	}
	if master < 0 {
		return nil
	}
	out := []int{master}
	for _, pid := range all {
		if parentOf(pid) == master {
			out = append(out, pid)
		}
	}
	return out
}

// cpuMeter measures the CPU seconds of named groups of processes over an
// interval. Processes that end within it count up to their last reading.
type cpuMeter struct {
	groups map[string]func() []int
	start  map[string]map[int]float64
	t0     time.Time
}

func newCPUMeter(groups map[string]func() []int) *cpuMeter {
	m := &cpuMeter{groups: groups, start: map[string]map[int]float64{}, t0: time.Now()}
	for name, pids := range groups {
		m.start[name] = map[int]float64{}
		for _, p := range pids() {
			m.start[name][p] = cpuSeconds(p)
		}
	}
	return m
}

// CPUShare is one group's CPU use over an interval.
type CPUShare struct {
	Group   string  `json:"group"`
	Seconds float64 `json:"cpu_seconds"`
	Cores   float64 `json:"cores"` // Seconds / wall seconds
}

// stop returns each group's CPU seconds since newCPUMeter, sorted by name.
func (m *cpuMeter) stop() []CPUShare {
	wall := time.Since(m.t0).Seconds()
	var out []CPUShare
	for name, pids := range m.groups {
		var s float64
		for _, p := range pids() {
			// A process born during the interval counts from zero.
			s += cpuSeconds(p) - m.start[name][p]
		}
		out = append(out, CPUShare{Group: name, Seconds: s, Cores: div(s, wall)})
	}
	sortShares(out)
	return out
}

func sortShares(s []CPUShare) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].Group < s[j-1].Group; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// Machine describes where a run happened.
type Machine struct {
	CPUs       int     `json:"cpus"`
	CPUModel   string  `json:"cpu_model"`
	MemoryGiB  float64 `json:"memory_gib"`
	Go         string  `json:"go"`
	PostgreSQL string  `json:"postgresql"`
	Kernel     string  `json:"kernel"`
	OpenFiles  uint64  `json:"open_files_limit"`
	LoadAvg    string  `json:"load_average_at_start"`
}

// DescribeMachine reads the machine's facts; adminURL names the PostgreSQL.
func DescribeMachine(ctx context.Context, adminURL string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				m.MemoryGiB = kb / (1 << 20)
			}
		}
	}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(raw))
	}
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(raw)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		m.OpenFiles = lim.Max
	}
	if adminURL != "" {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if c, err := pgx.Connect(cctx, adminURL); err == nil {
			_ = c.QueryRow(cctx, `SHOW server_version`).Scan(&m.PostgreSQL)
			c.Close(cctx)
		}
	}
	return m
}

// loadAverage is the 1-minute load average.
func loadAverage() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// goTool finds the go command for `go tool pprof`: GOROOT's, else PATH's.
func goTool() (string, error) {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p, nil
	}
	return exec.LookPath("go")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
