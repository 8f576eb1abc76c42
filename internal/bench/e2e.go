package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/producer"
)

// E2EConfig configures E2E. Zero fields take the defaults in brackets.
type E2EConfig struct {
	Conversations int       // [300] conversations, each with its own members
	Members       int       // [7] members per conversation (one WebSocket each)
	Partitions    int       // [12]
	Loads         []float64 // [100, 1000] fixed offered loads, msg/s, sends over HTTP
	PhaseSeconds  float64   // [10] length of a fixed load
	RampSeconds   float64   // [4] length of a ramp step
	RampSteps     int       // [6] most ramp steps (a bisection after the first failure); negative: none
	DrainSeconds  float64   // [3] wait for the last pushes after a phase
	// WSLoads are the fixed loads with the sends over the WebSocket (a
	// send frame on the sender's own socket, answered by send_ack), run
	// after the HTTP ones [Loads]; SkipWS leaves them out.
	WSLoads []float64
	SkipWS  bool
	// MaxP99Ms is the push p99 above which a load counts as not
	// sustained [500].
	MaxP99Ms float64
	// Profile takes CPU profiles of the gateway and of the orchestrator
	// (fanout and kfake) during the last fixed load.
	Profile bool
	// DBMaxConns is the gateway's PostgreSQL pool size [0: as `inboxd gateway`
	// without --db-max-conns, gateway.DBMaxConns: max(16, cores)].
	DBMaxConns int
	// SendCheckBatch and SendCheckRunners are the gateway's
	// (gateway.Config) [0: as inboxd gateway's defaults].
	SendCheckBatch, SendCheckRunners int
	// ApplyWorkers is the fanout's (fanout.Config) [0: its default].
	ApplyWorkers int
	// ConversationCache is the fanout's (fanout.Config) [0: its default;
	// negative: none].
	ConversationCache int
	// FanoutRowsPerSec, when known (bench all), is the reference of the
	// highest sustainable load: fan-out alone, same run.
	FanoutRowsPerSec float64
	// History is how many messages each conversation gets before the
	// gateway starts [20], followed by a settle (VACUUM ANALYZE,
	// CHECKPOINT), which is also done before every fixed load: the
	// figures are those of a database autovacuum keeps, not of tables
	// whose statements were planned while they were empty (the
	// projector's lookups kept sequential scans planned on the empty
	// tables: docs/benchmarks.md, "Where the time goes").
	History int
}

func (c *E2EConfig) setDefaults() {
	setDefault(&c.Conversations, 300)
	setDefault(&c.Members, 7)
	setDefault(&c.Partitions, 12)
	setDefault(&c.RampSteps, 6)
	setDefault(&c.History, 20)
	setDefault(&c.PhaseSeconds, 10)
	setDefault(&c.RampSeconds, 4)
	setDefault(&c.DrainSeconds, 3)
	setDefault(&c.MaxP99Ms, 500)
	if len(c.Loads) == 0 {
		c.Loads = []float64{100, 1000}
	}
	if len(c.WSLoads) == 0 {
		c.WSLoads = c.Loads
	}
	if c.SkipWS {
		c.WSLoads = nil
	}
}

// E2EResult is the outcome of E2E.
type E2EResult struct {
	Conversations int        `json:"conversations"`
	Members       int        `json:"members"`
	Connections   int        `json:"websockets"`
	Phases        []E2EPhase `json:"phases"` // the fixed loads (HTTP sends), then the highest sustainable
	Ramp          []E2EPhase `json:"ramp"`
	// WSPhases are the fixed loads with the sends over the WebSocket.
	WSPhases []E2EPhase `json:"ws_phases,omitempty"`
	// MaxSustainable is the highest offered load of the ramp that was
	// sustained (0: none); MaxPhase its index in Phases (-1: none).
	MaxSustainable float64 `json:"max_sustainable_msgs_per_sec"`
	MaxPhase       int     `json:"max_phase"`
	MaxP99Ms       float64 `json:"sustained_p99_bound_ms"`
	DrainSeconds   float64 `json:"drain_seconds"`
	// CPU is each group's CPU over the last fixed load of HTTP sends,
	// CPUPhase its name and CPUMessages the messages it sent (answered
	// 201 or 202); CPUWS and the rest the same over the last fixed load
	// of WebSocket sends. The meters run from the phase's first send to
	// the end of its drain, the settle before it excluded.
	CPUPhase         string     `json:"cpu_phase"`
	CPU              []CPUShare `json:"cpu"`
	CPUMessages      int64      `json:"cpu_messages,omitempty"`
	CPUWSPhase       string     `json:"cpu_ws_phase,omitempty"`
	CPUWS            []CPUShare `json:"cpu_ws,omitempty"`
	CPUWSMessages    int64      `json:"cpu_ws_messages,omitempty"`
	Profiles         []Profile  `json:"profiles"`
	FanoutRowsPerSec float64    `json:"fanout_rows_per_sec_reference"`
}

// Rows implements Result.
func (r E2EResult) Rows() []Row {
	var rows []Row
	for i, p := range r.Phases {
		name := fmt.Sprintf("HTTP send -> WebSocket push at %s msg/s offered (%d members), p50 / p90 / p99 / max", num(p.Offered), r.Members)
		if i == r.MaxPhase {
			name = fmt.Sprintf("HTTP send -> WebSocket push at the highest sustained load, %s msg/s (%d members), p50 / p90 / p99 / max", num(p.Offered), r.Members)
		}
		rows = append(rows, r.pushRow(name, p))
	}
	for _, p := range r.WSPhases {
		rows = append(rows, r.pushRow(fmt.Sprintf("WebSocket send frame -> WebSocket push at %s msg/s offered (%d members, the sender's own push included), p50 / p90 / p99 / max",
			num(p.Offered), r.Members), p))
	}
	if r.MaxSustainable > 0 {
		ref, rt := "fan-out alone: run `bench all`", "n/a"
		if r.FanoutRowsPerSec > 0 {
			ref = fmt.Sprintf("fan-out alone (bench fanout, 7 members, same run): %s inbox rows/s", num(r.FanoutRowsPerSec))
			rt = ratio(r.MaxSustainable*float64(r.Members), r.FanoutRowsPerSec)
		}
		rows = append(rows, Row{
			Figure:    fmt.Sprintf("highest sustained load through the gateway (push p99 <= %s, every push within %gs of the last send)", ms(r.MaxP99Ms), r.DrainSeconds),
			Value:     fmt.Sprintf("%s msg/s = %s inbox rows/s", num(r.MaxSustainable), num(r.MaxSustainable*float64(r.Members))),
			Reference: ref, Ratio: rt,
		})
	}
	for _, p := range r.Phases {
		if row, ok := stagesRow("HTTP", p); ok && !strings.HasPrefix(p.Name, finalPhaseName) {
			rows = append(rows, row)
		}
	}
	for _, p := range r.WSPhases {
		if row, ok := stagesRow("WebSocket", p); ok {
			rows = append(rows, row)
		}
	}
	rows = append(rows, cpuPerMessageRows("HTTP sends at "+r.CPUPhase, r.CPU, r.CPUMessages)...)
	rows = append(rows, cpuPerMessageRows("WebSocket sends at "+r.CPUWSPhase, r.CPUWS, r.CPUWSMessages)...)
	return rows
}

// pushRow is the send -> push row of one phase, next to the commit
// latency measured at the same time.
func (r E2EResult) pushRow(name string, p E2EPhase) Row {
	row := Row{
		Figure:    name,
		Value:     fmt.Sprintf("%s / %s / %s / %s", ms(p.Push.P50), ms(p.Push.P90), ms(p.Push.P99), ms(p.Push.Max)),
		Reference: fmt.Sprintf("single-row INSERT+COMMIT round trip, same time: %s / %s / %s / %s", ms(p.Commit.P50), ms(p.Commit.P90), ms(p.Commit.P99), ms(p.Commit.Max)),
		Ratio:     fmt.Sprintf("p50 %s, p99 %s", ratio(p.Push.P50, p.Commit.P50), ratio(p.Push.P99, p.Commit.P99)),
	}
	if !p.Sustained {
		row.Figure += " (not sustained: " + p.verdict(r.MaxP99Ms) + ")"
	}
	return row
}

// verdict says why a phase was not sustained.
func (p E2EPhase) verdict(maxP99 float64) string {
	switch {
	case p.Dropped > 0:
		return fmt.Sprintf("%d sends dropped at the in-flight cap", p.Dropped)
	case p.Achieved < 0.95*p.Offered:
		return fmt.Sprintf("achieved %s msg/s", num(p.Achieved))
	case p.SendErrors > p.Sent/1000:
		return fmt.Sprintf("%d send errors (%s)", p.SendErrors, p.FirstErrText)
	case p.Received < p.Expected:
		return fmt.Sprintf("%d of %d pushes in time", p.Received, p.Expected)
	case p.Push.P99 > maxP99:
		return fmt.Sprintf("p99 %s", ms(p.Push.P99))
	}
	return "sustained"
}

func (p *E2EPhase) judge(maxP99 float64) {
	p.Sustained = p.verdict(maxP99) == "sustained"
}

// finalPhaseName names the phases that confirm the ramp's highest
// sustained load over the length of a fixed load.
const finalPhaseName = "confirmation"

// fanoutTotals are the fanout's batch counters.
type fanoutTotals struct{ seconds, batches, records float64 }

func gatherFanout(reg *prometheus.Registry) fanoutTotals {
	var t fanoutTotals
	mfs, err := reg.Gather()
	if err != nil {
		return t
	}
	for _, mf := range mfs {
		if len(mf.GetMetric()) == 0 {
			continue
		}
		switch mf.GetName() {
		case "inboxd_fanout_batch_seconds":
			h := mf.GetMetric()[0].GetHistogram()
			t.seconds, t.batches = h.GetSampleSum(), float64(h.GetSampleCount())
		case "inboxd_fanout_records_total":
			t.records = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return t
}

func randomSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// E2E measures the latency from a send (HTTP POST, the worker's clock) to
// the push of the message on the WebSocket of each member, at fixed offered
// loads and at the highest load a short ramp finds sustainable, next to
// the commit latency of the same PostgreSQL at the same time. The gateway
// runs as a child process, the load generator as another; fanout and kfake
// run in the orchestrator.
func E2E(ctx context.Context, env *Env, cfg E2EConfig) (E2EResult, error) {
	cfg.setDefaults()
	res := E2EResult{Conversations: cfg.Conversations, Members: cfg.Members, MaxPhase: -1, MaxP99Ms: cfg.MaxP99Ms, DrainSeconds: cfg.DrainSeconds,
		FanoutRowsPerSec: cfg.FanoutRowsPerSec}
	pl, err := env.newPipeline(ctx, "e2e", cfg.Partitions)
	if err != nil {
		return res, err
	}
	defer pl.Close()
	reg, stopFanout, err := pl.startFanout(ctx, env, fanout.Config{ApplyWorkers: cfg.ApplyWorkers, ConversationCache: cfg.ConversationCache})
	if err != nil {
		return res, err
	}
	defer stopFanout()
	convs, err := e2eSetUp(ctx, env, pl, cfg)
	if err != nil {
		return res, err
	}
	r := &e2eRun{env: env, cfg: cfg, pl: pl, reg: reg, res: &res}
	defer r.kill()
	if err := r.start(ctx, convs); err != nil {
		return res, err
	}
	if err := r.fixedLoads(ctx); err != nil {
		return res, err
	}
	lo, err := r.ramp(ctx)
	if err != nil {
		return res, err
	}
	if err := r.confirm(ctx, lo); err != nil {
		return res, err
	}
	_ = r.wk.send("quit")
	_ = r.wk.stop(10 * time.Second)
	_ = r.gw.stop(20 * time.Second)
	for i := range res.Profiles {
		res.Profiles[i].Top = pprofTop(ctx, res.Profiles[i].Path, 25)
		res.Profiles[i].TopCum = pprofTop(ctx, res.Profiles[i].Path, 30, "-cum")
	}
	return res, nil
}

// e2eSetUp creates the conversations of distinct users (one WebSocket per
// user), gives each its history, and settles the database.
func e2eSetUp(ctx context.Context, env *Env, pl *pipeline, cfg E2EConfig) ([]e2eConv, error) {
	convs, err := appendConversations(ctx, pl.prod, cfg.Conversations, cfg.Members)
	if err != nil {
		return nil, err
	}
	if err := appendHistory(ctx, pl.pool, pl.prod, convs, cfg.History); err != nil {
		return nil, err
	}
	if err := testenv.WaitCaughtUp(ctx, pl.pool, pl.prod, 2*time.Minute); err != nil {
		return nil, err
	}
	took, err := pl.settle(ctx)
	if err != nil {
		return nil, err
	}
	progressf(env.Progress, "bench e2e: %d conversations of %d members created with %d messages each, settled in %.1fs",
		cfg.Conversations, cfg.Members, cfg.History, took.Seconds())
	return convs, nil
}

// e2eRun is a run of the e2e figure: its gateway and load generator, and
// the result its phases fill in.
type e2eRun struct {
	env    *Env
	cfg    E2EConfig
	pl     *pipeline
	reg    *prometheus.Registry // the fanout's
	gw, wk *child
	ready  serveReady
	groups map[string]func() []int // the CPU meters' process groups
	res    *E2EResult
}

// start starts the gateway and the load generator, and waits until every
// WebSocket is up.
func (r *e2eRun) start(ctx context.Context, convs []e2eConv) error {
	env, cfg := r.env, r.cfg
	secret := randomSecret()
	var err error
	r.gw, r.ready, err = startServe(ctx, env, "gateway", serveConfig{Mode: "gateway", DatabaseURL: r.pl.url, Brokers: r.pl.brokers,
		Partitions: cfg.Partitions, Secret: secret, MaxConns: 19000, DBMaxConns: cfg.DBMaxConns,
		SendCheckBatch: cfg.SendCheckBatch, SendCheckRunners: cfg.SendCheckRunners})
	if err != nil {
		return err
	}
	r.wk, err = env.Runner.start(env.Progress, "e2e-load", []string{"worker", "e2e"}, e2eWorkerConfig{
		Addr: r.ready.Addr, Secret: secret, Convs: convs, SrcIPs: sourceIPs(2, 4), DatabaseURL: r.pl.url,
		Deadline: 20 * time.Minute})
	if err != nil {
		return err
	}
	var rd struct {
		Connections int `json:"connections"`
	}
	if err := r.wk.expectJSON(ctx, "ready", 3*time.Minute, &rd); err != nil {
		return err
	}
	r.res.Connections = rd.Connections
	progressf(env.Progress, "bench e2e: %d WebSockets connected", rd.Connections)
	r.groups = map[string]func() []int{
		cpuGroupGateway:       func() []int { return []int{r.ready.Pid} },
		cpuGroupFanout:        func() []int { return []int{os.Getpid()} },
		cpuGroupLoadGenerator: func() []int { return []int{r.wk.pid()} },
		cpuGroupPostgreSQL:    env.postgresPids,
	}
	if env.PGData == "" {
		delete(r.groups, cpuGroupPostgreSQL)
	}
	return nil
}

// kill ends the children that are still running.
func (r *e2eRun) kill() {
	r.wk.kill()
	r.gw.kill()
}

// phase runs one phase in the load generator and adds what the fanout's
// and the gateway's own metrics say of it.
func (r *e2eRun) phase(ctx context.Context, name, transport string, rate, secs float64) (E2EPhase, error) {
	pr, cfg := r.env.Progress, r.cfg
	progressf(pr, "bench e2e: %s: offering %s msg/s for %gs ...", name, num(rate), secs)
	cmd, _ := json.Marshal(e2ePhaseCmd{Name: name, Transport: transport, Rate: rate, Seconds: secs, DrainSeconds: cfg.DrainSeconds})
	f0 := gatherFanout(r.reg)
	g0, fl0 := gatewayHists(ctx, r.ready.Ctl, sendStageMetric), gatherHists(r.reg, fanoutLatencyMetric)
	t0 := time.Now()
	if err := r.wk.send("phase " + string(cmd)); err != nil {
		return E2EPhase{}, err
	}
	var p E2EPhase
	if err := r.wk.expectJSON(ctx, "result", time.Duration(secs+cfg.DrainSeconds+120)*time.Second, &p); err != nil {
		return p, err
	}
	f1 := gatherFanout(r.reg)
	p.Stages = append(stageDeltas(g0, gatewayHists(ctx, r.ready.Ctl, sendStageMetric), "gateway ", "check", "append", "projection"),
		stageDeltas(fl0, gatherHists(r.reg, fanoutLatencyMetric), "fanout ", "queued", "committed")...)
	if n := f1.batches - f0.batches; n > 0 {
		p.FanoutBusy = (f1.seconds - f0.seconds) / time.Since(t0).Seconds()
		p.FanoutBatchMs = (f1.seconds - f0.seconds) / n * 1000
		p.FanoutPerBatch = (f1.records - f0.records) / n
	}
	p.judge(cfg.MaxP99Ms)
	progressf(pr, "bench e2e: %s: achieved %s msg/s, push p50 %s p99 %s (commit p50 %s p99 %s), %d/%d pushes, fanout transactions busy %.0f%% (summed over the concurrent apply workers; batches of %.1f records in %s), %s",
		name, num(p.Achieved), ms(p.Push.P50), ms(p.Push.P99), ms(p.Commit.P50), ms(p.Commit.P99), p.Received, p.Expected,
		p.FanoutBusy*100, p.FanoutPerBatch, ms(p.FanoutBatchMs), p.verdict(cfg.MaxP99Ms))
	if len(p.Stages) > 0 {
		progressf(pr, "bench e2e: %s: where a send's time goes: %s", name, stagesText(p.Stages))
	}
	return p, nil
}

// fixedLoads runs the fixed loads, HTTP sends then WebSocket ones, each
// after a settle; the CPU meters and the profiles run over the last of
// each (the profiles: HTTP only).
func (r *e2eRun) fixedLoads(ctx context.Context) error {
	res := r.res
	var err error
	if res.Phases, res.CPU, err = r.fixed(ctx, transportHTTP, r.cfg.Loads); err != nil {
		return err
	}
	if n := len(res.Phases); n > 0 {
		res.CPUPhase = num(res.Phases[n-1].Offered) + " msg/s"
		res.CPUMessages = res.Phases[n-1].Created + res.Phases[n-1].Pending
	}
	if len(r.cfg.WSLoads) == 0 {
		return nil
	}
	if res.WSPhases, res.CPUWS, err = r.fixed(ctx, transportWS, r.cfg.WSLoads); err != nil {
		return err
	}
	n := len(res.WSPhases)
	res.CPUWSPhase = num(res.WSPhases[n-1].Offered) + " msg/s"
	res.CPUWSMessages = res.WSPhases[n-1].Created + res.WSPhases[n-1].Pending
	return nil
}

func (r *e2eRun) fixed(ctx context.Context, transport string, loads []float64) ([]E2EPhase, []CPUShare, error) {
	var phases []E2EPhase
	var cpu []CPUShare
	for i, rate := range loads {
		last := i == len(loads)-1
		if _, err := r.pl.settle(ctx); err != nil {
			return phases, cpu, err
		}
		var meter *cpuMeter
		var profs []<-chan error
		if last {
			meter = newCPUMeter(r.groups)
			if r.cfg.Profile && transport == transportHTTP {
				profs = r.res.startProfiles(ctx, r.env, r.ready.Ctl, rate, max(1, int(r.cfg.PhaseSeconds)-1))
			}
		}
		name := fmt.Sprintf("load %s msg/s", num(rate))
		if transport == transportWS {
			name = fmt.Sprintf("WebSocket sends, load %s msg/s", num(rate))
		}
		p, err := r.phase(ctx, name, transport, rate, r.cfg.PhaseSeconds)
		if err != nil {
			return phases, cpu, err
		}
		if meter != nil {
			cpu = meter.stop()
		}
		for _, c := range profs {
			if err := <-c; err != nil {
				progressf(r.env.Progress, "bench e2e: profile: %v", err)
			}
		}
		phases = append(phases, p)
	}
	return phases, cpu, nil
}

// ramp searches between the highest sustained load and the lowest one
// that was not: up by half while nothing failed, down by 40% while
// nothing was sustained, then halving the interval, until it is within
// 15%. Its steps are short, HTTP sends only; it returns the highest load
// they sustained.
func (r *e2eRun) ramp(ctx context.Context) (float64, error) {
	lo, hi := 0.0, 0.0
	note := func(p E2EPhase) {
		if p.Sustained {
			lo = max(lo, p.Offered)
		} else if hi == 0 || p.Offered < hi {
			hi = p.Offered
		}
	}
	for _, p := range r.res.Phases {
		note(p)
	}
	for step := 0; step < r.cfg.RampSteps; step++ {
		var next float64
		switch {
		case hi == 0:
			next = lo * 1.5
		case lo == 0:
			next = hi * 0.6
		case hi/lo > 1.15:
			next = math.Round((lo+hi)/2/10) * 10
		}
		if next <= lo || (hi > 0 && next >= hi) {
			break
		}
		p, err := r.phase(ctx, fmt.Sprintf("ramp step %d", step+1), transportHTTP, next, r.cfg.RampSeconds)
		if err != nil {
			return lo, err
		}
		r.res.Ramp = append(r.res.Ramp, p)
		note(p)
		if !p.Sustained {
			// Let the backlog of an overload drain before the next step.
			sleepCtx(ctx, time.Duration(r.cfg.DrainSeconds*float64(time.Second)))
		}
	}
	return lo, nil
}

// confirm measures lo, the highest load the ramp's short steps sustained,
// as long as a fixed load: a short step can pass where a long phase does
// not, so a failed confirmation is tried again at 85%, at most twice,
// never below the highest sustained fixed load.
func (r *e2eRun) confirm(ctx context.Context, lo float64) error {
	res, cfg := r.res, r.cfg
	floor := 0.0
	for i, p := range res.Phases {
		if p.Sustained {
			floor = max(floor, p.Offered)
			if p.Offered == lo {
				res.MaxPhase = i
			}
		}
	}
	rate := lo
	for try := 0; res.MaxPhase < 0 && rate > floor && try < 3; try++ {
		p, err := r.phase(ctx, fmt.Sprintf("%s %d", finalPhaseName, try+1), transportHTTP, rate, cfg.PhaseSeconds)
		if err != nil {
			return err
		}
		res.Phases = append(res.Phases, p)
		if p.Sustained {
			res.MaxPhase = len(res.Phases) - 1
			break
		}
		sleepCtx(ctx, time.Duration(cfg.DrainSeconds*float64(time.Second)))
		rate = math.Round(rate*0.85/10) * 10
	}
	if res.MaxPhase < 0 && floor > 0 {
		for i, p := range res.Phases {
			if p.Sustained && p.Offered == floor {
				res.MaxPhase = i
			}
		}
	}
	if res.MaxPhase >= 0 {
		res.MaxSustainable = res.Phases[res.MaxPhase].Offered
	}
	return nil
}

// startProfiles starts the CPU profiles of the gateway and of the
// orchestrator for secs seconds of the load at rate, and notes them in r.
func (r *E2EResult) startProfiles(ctx context.Context, env *Env, ctl string, rate float64, secs int) []<-chan error {
	gp := filepath.Join(env.OutDir, "e2e-gateway.pprof")
	fp := filepath.Join(env.OutDir, "e2e-orchestrator.pprof")
	r.Profiles = append(r.Profiles,
		Profile{Name: fmt.Sprintf("gateway during e2e at %s msg/s", num(rate)), Path: gp, Seconds: float64(secs)},
		Profile{Name: fmt.Sprintf("orchestrator (fanout + kfake) during e2e at %s msg/s", num(rate)), Path: fp, Seconds: float64(secs)})
	return []<-chan error{profileGateway(ctx, ctl, secs, gp), profileSelf(ctx, time.Duration(secs)*time.Second, fp)}
}

// appendHistory appends n messages to each conversation, from its members
// in turn, sealed as the gateway seals them (their keys in body_keys, so
// that the table is not empty when the statements reading it are planned),
// and waits for the producer's acknowledgements.
func appendHistory(ctx context.Context, pool *pgxpool.Pool, prod *producer.Producer, convs []e2eConv, n int) error {
	body := strings.Repeat("h", 32)
	var evs []*events.Event
	var ids []string
	var keys [][]byte
	for i := 0; i < n; i++ {
		for _, c := range convs {
			e := events.New(events.MessageSent, c.ID, c.Members[i%len(c.Members)])
			e.MsgID = uuid.NewString()
			key := events.NewKey()
			sealed, err := events.Seal(key, e.MsgID, body)
			if err != nil {
				return fmt.Errorf("seal the history: %w", err)
			}
			e.SealedBody = sealed
			evs, ids, keys = append(evs, e), append(ids, e.MsgID), append(keys, key)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO body_keys (msg_id, key) SELECT * FROM unnest($1::uuid[], $2::bytea[])`, ids, keys); err != nil {
		return fmt.Errorf("the history's body keys: %w", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, e := range evs {
		wg.Add(1)
		prod.AppendAsync(ctx, e, func(_ producer.Position, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return fmt.Errorf("append the history: %w", first)
	}
	return nil
}
