package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// AllConfig configures All. Each figure's zero config takes its defaults.
type AllConfig struct {
	Fanout7  FanoutConfig // [7 members, 100,000 messages]
	Fanout50 FanoutConfig // [50 members, 20,000 messages, no replay]
	E2E      E2EConfig
	Sync     SyncConfig
	Idle     IdleConfig
	Storm    StormConfig
	Changes  ChangesConfig
	Large    LargeConfig
	// Only runs these figures (fanout, e2e, sync, idle, storm, changes,
	// large); empty: all but changes and large, which run only when named
	// (changes would add about two minutes to the suite, large several,
	// and the report's tables predate them).
	Only []string
	// Docs is the report to update between its marker comments (empty:
	// none); Images the directory of its charts.
	Docs   string
	Images string
	// NoProfiles skips the CPU profiles.
	NoProfiles bool
}

// Quick returns c with every figure shrunk, to check the suite end to end
// in a minute or two; its figures are not the report's.
func (c AllConfig) Quick() AllConfig {
	c.Fanout7 = FanoutConfig{Messages: 10000, Conversations: 500}
	c.Fanout50 = FanoutConfig{Messages: 2000, Conversations: 200}
	c.E2E = E2EConfig{Conversations: 60, PhaseSeconds: 3, RampSeconds: 2, RampSteps: 2, DrainSeconds: 2}
	c.Sync = SyncConfig{Users: 500, Seconds: 2, Conns: 16}
	c.Idle = IdleConfig{Conns: 2000, Workers: 2, Settle: 1}
	c.Storm = StormConfig{Clients: 400, Hold: 2500 * time.Millisecond, RecoverTimeout: 30 * time.Second}
	c.Changes = ChangesConfig{Conversations: 60, Rate: 200, Seconds: 3, WarmupSeconds: 1, DrainSeconds: 2,
		ReactionMembers: 100, ReactionRate: 200, ReactionSeconds: 2}
	c.Large = LargeConfig{Members: 5000, Connected: 500, Seconds: 10, Small: 200, SmallRate: 50, SyncRequests: 100}
	return c
}

// ReadAllResult reads the JSON of a bench all.
func ReadAllResult(path string) (AllResult, error) {
	var res AllResult
	raw, err := os.ReadFile(path)
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return res, fmt.Errorf("%s: %w", path, err)
	}
	return res, nil
}

// AllResult is every figure of one run.
type AllResult struct {
	Machine     Machine   `json:"machine"`
	Started     time.Time `json:"started"`
	Seconds     float64   `json:"seconds"`
	LoadAtStart float64   `json:"load_average_1m_at_start"`
	LoadAtEnd   float64   `json:"load_average_1m_at_end"`
	LoadMax     float64   `json:"load_average_1m_max"` // sampled every 5 s
	// LoadByFigure is the highest 1-minute load average seen during each
	// figure; the suite's own processes count in it (the storm's naive
	// clients and the e2e run alone keep well over two threads runnable).
	LoadByFigure map[string]float64 `json:"load_average_1m_max_by_figure"`
	Fanout7      *FanoutResult      `json:"fanout_7,omitempty"`
	Fanout50     *FanoutResult      `json:"fanout_50,omitempty"`
	E2E          *E2EResult         `json:"e2e,omitempty"`
	Sync         *SyncResult        `json:"sync,omitempty"`
	Idle         *IdleResult        `json:"idle,omitempty"`
	Storm        *StormResult       `json:"storm,omitempty"`
	Changes      *ChangesResult     `json:"changes,omitempty"`
	Large        *LargeResult       `json:"large,omitempty"`
	Errors       map[string]string  `json:"errors,omitempty"`
	Charts       []string           `json:"charts,omitempty"`
}

// section is one figure's rows under a heading.
type section struct {
	Name string
	Rows []Row
}

func (r AllResult) sections() []section {
	var s []section
	if r.Fanout7 != nil || r.Fanout50 != nil {
		var rows []Row
		if r.Fanout7 != nil {
			rows = append(rows, r.Fanout7.Rows()...)
		}
		if r.Fanout50 != nil {
			rows = append(rows, r.Fanout50.Rows()...)
		}
		s = append(s, section{"Fan-out (`inboxd-bench fanout`)", rows})
	}
	if r.E2E != nil {
		s = append(s, section{"End-to-end latency, send -> WebSocket push (`inboxd-bench e2e`)", r.E2E.Rows()})
	}
	if r.Sync != nil {
		s = append(s, section{"Sync (`inboxd-bench sync`)", r.Sync.Rows()})
	}
	if r.Idle != nil {
		s = append(s, section{"Idle WebSockets (`inboxd-bench idle`)", r.Idle.Rows()})
	}
	if r.Storm != nil {
		s = append(s, section{"Reconnect storm (`inboxd-bench storm`)", r.Storm.Rows()})
	}
	if r.Changes != nil {
		s = append(s, section{"Changes of a message: edit -> push, reaction bursts (`inboxd-bench changes`)", r.Changes.Rows()})
	}
	if r.Large != nil {
		s = append(s, section{"Large conversations, read fan-out (`inboxd-bench large`)", r.Large.Rows()})
	}
	return s
}

// Rows implements Result: the goals (when a figure behind them ran),
// then every figure.
func (r AllResult) Rows() []Row {
	var rows []Row
	if r.hasGoals() {
		rows = goalRows(goalsOf(r))
	}
	for _, s := range r.sections() {
		rows = append(rows, s.Rows...)
	}
	return rows
}

// hasGoals says whether a figure behind the goals ran (not so in `all
// --only changes` or `--only large`).
func (r AllResult) hasGoals() bool {
	return r.Fanout7 != nil || r.Fanout50 != nil || r.E2E != nil || r.Sync != nil
}

// Profiles are the CPU profiles of the run.
func (r AllResult) Profiles() []Profile {
	var p []Profile
	if r.E2E != nil {
		p = append(p, r.E2E.Profiles...)
	}
	if r.Sync != nil {
		p = append(p, r.Sync.Profiles...)
	}
	if r.Idle != nil && r.Idle.Gateway.Profile != nil {
		p = append(p, *r.Idle.Gateway.Profile)
	}
	return p
}

func (c AllConfig) wants(fig string) bool {
	if len(c.Only) == 0 {
		return fig != "changes" && fig != "large"
	}
	for _, o := range c.Only {
		if o == fig {
			return true
		}
	}
	return false
}

// All runs every figure on one PostgreSQL, one after the other, then
// writes the charts and updates the report. A figure that fails is
// reported in Errors and the others still run.
func All(ctx context.Context, env *Env, cfg AllConfig) (AllResult, error) {
	res := AllResult{Started: time.Now().UTC(), LoadAtStart: loadAverage(), Errors: map[string]string{}}
	res.Machine = DescribeMachine(ctx, env.AdminURL)
	// The load average over the run says whether something else ran
	// beside it (the bench itself keeps 2 cores busy at most).
	var (
		loadMu  sync.Mutex
		loadFig string
	)
	res.LoadByFigure = map[string]float64{}
	lctx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan float64, 1)
	go func() {
		m := loadAverage()
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				loadDone <- m
				return
			case <-t.C:
				l := loadAverage()
				m = max(m, l)
				loadMu.Lock()
				if loadFig != "" {
					res.LoadByFigure[loadFig] = max(res.LoadByFigure[loadFig], l)
				}
				loadMu.Unlock()
			}
		}
	}()
	pr := env.Progress
	progressf(pr, "bench all: %d CPUs, %.1f GiB, %s, PostgreSQL %s, load average %.2f", res.Machine.CPUs,
		res.Machine.MemoryGiB, res.Machine.Go, res.Machine.PostgreSQL, res.LoadAtStart)
	if res.LoadAtStart > float64(res.Machine.CPUs)/2 {
		progressf(pr, "bench all: warning: the machine is busy (load %.2f on %d CPUs); the ratios hold better than the absolute figures", res.LoadAtStart, res.Machine.CPUs)
	}
	step := func(name string, f func() error) {
		if ctx.Err() != nil {
			return
		}
		t0 := time.Now()
		loadMu.Lock()
		loadFig = name
		loadMu.Unlock()
		progressf(pr, "bench all: == %s ==", name)
		if err := f(); err != nil {
			res.Errors[name] = err.Error()
			progressf(pr, "bench all: %s failed: %v", name, err)
			return
		}
		loadMu.Lock()
		l := res.LoadByFigure[name]
		loadMu.Unlock()
		progressf(pr, "bench all: %s done in %.0fs (load average up to %.2f)", name, time.Since(t0).Seconds(), l)
	}
	if cfg.wants("fanout") {
		step("fanout, 7 members", func() error {
			c := cfg.Fanout7
			if c.Members == 0 {
				c.Members = 7
			}
			r, err := Fanout(ctx, env, c)
			res.Fanout7 = &r
			return err
		})
		step("fanout, 50 members", func() error {
			c := cfg.Fanout50
			if c.Members == 0 {
				c.Members = 50
			}
			if c.Messages == 0 {
				c.Messages = 20000
			}
			c.SkipReplay = true
			r, err := Fanout(ctx, env, c)
			res.Fanout50 = &r
			return err
		})
	}
	if cfg.wants("e2e") {
		step("e2e", func() error {
			c := cfg.E2E
			c.Profile = !cfg.NoProfiles
			if res.Fanout7 != nil {
				c.FanoutRowsPerSec = res.Fanout7.RowsPerSec
			}
			r, err := E2E(ctx, env, c)
			res.E2E = &r
			return err
		})
	}
	if cfg.wants("sync") {
		step("sync", func() error {
			c := cfg.Sync
			c.Profile = !cfg.NoProfiles
			r, err := Sync(ctx, env, c)
			res.Sync = &r
			return err
		})
	}
	if cfg.wants("idle") {
		step("idle", func() error {
			r, err := Idle(ctx, env, cfg.Idle)
			res.Idle = &r
			return err
		})
	}
	if cfg.wants("storm") {
		step("storm", func() error {
			r, err := Storm(ctx, env, cfg.Storm)
			res.Storm = &r
			return err
		})
	}
	if cfg.wants("changes") {
		step("changes", func() error {
			r, err := Changes(ctx, env, cfg.Changes)
			res.Changes = &r
			return err
		})
	}
	if cfg.wants("large") {
		step("large", func() error {
			r, err := Large(ctx, env, cfg.Large)
			res.Large = &r
			return err
		})
	}
	res.Seconds = time.Since(res.Started).Seconds()
	res.LoadAtEnd = loadAverage()
	stopLoad()
	res.LoadMax = <-loadDone // the sampler has stopped writing LoadByFigure
	if err := WriteReport(&res, cfg.Docs, cfg.Images); err != nil {
		res.Errors["report"] = err.Error()
	} else if cfg.Docs != "" {
		progressf(pr, "bench all: %s updated", cfg.Docs)
	}
	if len(res.Errors) > 0 {
		var names []string
		for n := range res.Errors {
			names = append(names, n)
		}
		sort.Strings(names)
		return res, fmt.Errorf("bench all: %s failed", strings.Join(names, ", "))
	}
	if len(res.Errors) == 0 {
		res.Errors = nil
	}
	return res, nil
}

// WriteReport draws the charts of res into images (empty: none) and
// replaces the generated blocks of the report at docs (empty: none).
func WriteReport(res *AllResult, docs, images string) error {
	if images != "" {
		charts, err := writeCharts(*res, images)
		res.Charts = charts
		if err != nil {
			return fmt.Errorf("charts: %w", err)
		}
	}
	if docs != "" {
		return updateReport(docs, *res)
	}
	return nil
}

// writeCharts draws the charts of res into dir and returns their paths.
func writeCharts(res AllResult, dir string) ([]string, error) {
	var out []string
	if res.E2E != nil && len(res.E2E.Phases) > 0 {
		p := filepath.Join(dir, "e2e-latency.png")
		if err := e2eChart(*res.E2E).WritePNG(p); err != nil {
			return out, err
		}
		out = append(out, p)
	}
	if res.Storm != nil && len(res.Storm.Runs) > 0 {
		p := filepath.Join(dir, "storm-requests.png")
		if err := stormChart(*res.Storm, false).WritePNG(p); err != nil {
			return out, err
		}
		out = append(out, p)
		p = filepath.Join(dir, "storm-connected.png")
		if err := stormChart(*res.Storm, true).WritePNG(p); err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}
