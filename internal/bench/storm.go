package bench

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"
)

// StormConfig configures Storm. Zero fields take the defaults in brackets.
type StormConfig struct {
	Clients int // [3000]
	Workers int // [2] client processes
	IPs     int // [2] source addresses per worker
	// Hold is how long the clients stay connected before the cut [3s]; it
	// exceeds StablePeriod [2s] of the SDK, so the connections count as
	// long-lived ones (the SDK's default is 30s).
	Hold time.Duration
	// KillHold is Hold for sdk-kill [25s]: longer than the gateway's
	// heartbeat (20s ±10%), so that every client has the crash hint of
	// the whole crowd (a welcome's window counts the sessions connected
	// before it; the heartbeats refresh it), as long-lived connections do.
	KillHold     time.Duration
	StablePeriod time.Duration
	// RecoverTimeout bounds the wait for every client to be back [45s].
	RecoverTimeout time.Duration
	Tail           time.Duration // recorded after the recovery [2s]
	// Down is how long the gateway stays down after the old process has
	// exited, before the new one starts [3s]: a deploy or a crash and its
	// supervisor's restart delay, during which connections are refused.
	Down time.Duration
	Nice int // of the client processes [10]
	// Modes to run, of "sdk" (the client package with its defaults),
	// "sdk-ws" (the same on WebSocket only, no long-polling fallback),
	// "naive" (these three against a gateway without reconnect hints),
	// "sdk-hints" (the SDK, a gateway with hints stopped by SIGTERM) and
	// "sdk-kill" (the same gateway killed with SIGKILL) [all five].
	Modes []string
	// RestartDelay is the gateway's --restart-delay in the hinted runs:
	// the operator's estimate of how long a restart takes [Down + 1s].
	RestartDelay time.Duration
	// AdmitRate is the gateway's --admit-rate in the hinted runs [0: the
	// gateway's default].
	AdmitRate float64
}

func (c *StormConfig) setDefaults() {
	if c.Clients == 0 {
		c.Clients = 3000
	}
	if c.Workers == 0 {
		c.Workers = 2
	}
	if c.IPs == 0 {
		c.IPs = 2
	}
	if c.Hold == 0 {
		c.Hold = 3 * time.Second
	}
	if c.KillHold == 0 {
		c.KillHold = 25 * time.Second
	}
	if c.StablePeriod == 0 {
		c.StablePeriod = 2 * time.Second
	}
	if c.RecoverTimeout == 0 {
		c.RecoverTimeout = 45 * time.Second
	}
	if c.Tail == 0 {
		c.Tail = 2 * time.Second
	}
	if c.Down == 0 {
		c.Down = 3 * time.Second
	}
	if c.Nice == 0 {
		c.Nice = 10
	}
	if len(c.Modes) == 0 {
		c.Modes = []string{"sdk", "sdk-ws", "naive", "sdk-hints", "sdk-kill"}
	}
	if c.RestartDelay == 0 {
		c.RestartDelay = c.Down + time.Second
	}
}

// StormRun is one kind of client through one gateway restart.
type StormRun struct {
	Mode           string  `json:"mode"`
	Clients        int     `json:"clients"`
	ConnectedAtCut int     `json:"connected_at_cut"`
	StopSeconds    float64 `json:"gateway_stop_seconds"` // cut -> old process gone
	Downtime       float64 `json:"gateway_downtime_seconds"`
	RecoverSeconds float64 `json:"recover_seconds"` // cut -> every client up again; -1: not within the timeout
	Recovered      int     `json:"recovered"`
	Polling        int     `json:"recovered_on_long_polling"`
	PeakPerSec     float64 `json:"peak_requests_per_sec"` // highest 1-s window from the cut on
	Requests       int64   `json:"requests_until_recovered"`
	// The series, per bucket: seconds from the cut, requests/s, clients up.
	T         []float64 `json:"t"`
	Rate      []float64 `json:"rate"`
	Connected []int     `json:"connected"`
}

// StormResult is the outcome of Storm.
type StormResult struct {
	Clients int        `json:"clients"`
	Workers int        `json:"workers"`
	Runs    []StormRun `json:"runs"`
}

func (r StormResult) run(mode string) (StormRun, bool) {
	for _, x := range r.Runs {
		if x.Mode == mode {
			return x, true
		}
	}
	return StormRun{}, false
}

// stormNames names the kinds of client.
var stormNames = map[string]string{
	"sdk":       "SDK (client package, defaults)",
	"sdk-ws":    "SDK on WebSocket only",
	"naive":     "naive client (reconnects at once)",
	"sdk-hints": "SDK with hints, SIGTERM (planned)",
	"sdk-kill":  "SDK with hints, kill -9 (no word)",
}

// Rows implements Result.
func (r StormResult) Rows() []Row {
	nv, okNaive := r.run("naive")
	secs := func(v float64) string {
		if v < 0 {
			return "not within the timeout"
		}
		return fmt.Sprintf("%.1f s", v)
	}
	var rows []Row
	for _, mode := range []string{"sdk", "sdk-ws"} {
		x, ok := r.run(mode)
		if !ok || !okNaive {
			continue
		}
		name := stormNames[mode]
		if x.Polling > 0 {
			name += fmt.Sprintf(", %s of them back on long-polling", num(float64(x.Polling)))
		}
		rows = append(rows, Row{
			Figure:    fmt.Sprintf("reconnect storm, %s clients, gateway restarted: peak request rate (1 s window), %s", num(float64(r.Clients)), name),
			Value:     num(x.PeakPerSec) + " req/s",
			Reference: "naive client (reconnects at once), same run: " + num(nv.PeakPerSec) + " req/s",
			Ratio:     "naive/SDK " + ratio(nv.PeakPerSec, x.PeakPerSec),
		}, Row{
			Figure:    "reconnect storm: requests until every client is back, " + stormNames[mode],
			Value:     num(float64(x.Requests)),
			Reference: "naive client: " + num(float64(nv.Requests)),
			Ratio:     "naive/SDK " + ratio(float64(nv.Requests), float64(x.Requests)),
		}, Row{
			Figure:    "reconnect storm: time from the stop until every client is back, " + stormNames[mode],
			Value:     secs(x.RecoverSeconds),
			Reference: "naive client: " + secs(nv.RecoverSeconds),
			Ratio:     "naive/SDK " + ratio(nv.RecoverSeconds, x.RecoverSeconds),
		})
	}
	rows = append(rows, r.hintedRows(nv)...)
	for _, x := range r.Runs {
		rows = append(rows, Row{
			Figure:    "reconnect storm: time until every client is back, " + stormNames[x.Mode],
			Value:     secs(x.RecoverSeconds),
			Reference: fmt.Sprintf("gateway downtime (stop -> new process serving): %.1f s", x.Downtime),
			Ratio:     ratio(x.RecoverSeconds, x.Downtime),
		})
	}
	return rows
}

// hintedRows compares the runs with reconnect hints to the SDK without
// them (and the naive client nv) of the same run.
func (r StormResult) hintedRows(nv StormRun) []Row {
	var rows []Row
	sdk, okSDK := r.run("sdk")
	for _, mode := range []string{"sdk-hints", "sdk-kill"} {
		x, ok := r.run(mode)
		if !ok || !okSDK {
			continue
		}
		rows = append(rows, Row{
			Figure:    fmt.Sprintf("reconnect storm, %s clients: requests per client until every client is back, %s", num(float64(r.Clients)), stormNames[mode]),
			Value:     fmt.Sprintf("%.2f", perClient(x)),
			Reference: fmt.Sprintf("SDK without hints, same run: %.2f (naive client: %.1f)", perClient(sdk), perClient(nv)),
			Ratio:     "SDK/hinted " + ratio(perClient(sdk), perClient(x)),
		}, Row{
			Figure:    "reconnect storm: peak request rate (1 s window), " + stormNames[mode],
			Value:     num(x.PeakPerSec) + " req/s",
			Reference: "SDK without hints, same run: " + num(sdk.PeakPerSec) + " req/s",
			Ratio:     "SDK/hinted " + ratio(sdk.PeakPerSec, x.PeakPerSec),
		})
	}
	return rows
}

// perClient is the requests until every client was back, per client.
func perClient(x StormRun) float64 {
	if x.Clients == 0 {
		return 0
	}
	return float64(x.Requests) / float64(x.Clients)
}

// Storm connects cfg.Clients clients of each mode split over cfg.Workers
// processes, restarts the gateway (SIGTERM: its sessions are closed with
// 1012; SIGKILL for sdk-kill; cfg.Down later a new process on the same
// address), and records the requests per 100 ms the clients make until
// every one is back. Requests are counted at the clients: WebSocket
// handshakes attempted (connects refused included) and HTTP requests. The
// gateway runs without reconnect hints for sdk, sdk-ws and naive (the
// behaviour before them), with them for sdk-hints and sdk-kill.
func Storm(ctx context.Context, env *Env, cfg StormConfig) (StormResult, error) {
	cfg.setDefaults()
	res := StormResult{Clients: cfg.Clients, Workers: cfg.Workers}
	url, drop, err := env.newDatabase(ctx, "storm")
	if err != nil {
		return res, err
	}
	defer drop()
	cluster, err := newKafka(4)
	if err != nil {
		return res, err
	}
	defer cluster.Close()
	st := &stormBench{env: env, cfg: cfg, scfg: serveConfig{Mode: "gateway", DatabaseURL: url,
		Brokers: cluster.ListenAddrs(), Partitions: 4, Secret: randomSecret(), MaxConns: cfg.Clients + 1000,
		RestartDelay: cfg.RestartDelay, AdmitRate: cfg.AdmitRate}}
	defer st.stopGateway()
	for mi, mode := range cfg.Modes {
		run, err := st.run(ctx, mi, mode)
		if err != nil {
			return res, err
		}
		progressf(env.Progress, "bench storm: %s: peak %s req/s, %s requests (%.2f per client), all back after %.1fs (%d recovered, %d on long-polling)",
			mode, num(run.PeakPerSec), num(float64(run.Requests)), float64(run.Requests)/float64(run.Clients), run.RecoverSeconds, run.Recovered, run.Polling)
		res.Runs = append(res.Runs, run)
	}
	return res, nil
}

// stormBench is the state of Storm across its runs: the gateway process
// and the settings it was started with.
type stormBench struct {
	env  *Env
	cfg  StormConfig
	scfg serveConfig // Addr set once the first gateway listens
	gw   *child
}

// hinted says whether mode runs against a gateway with reconnect hints.
func hinted(mode string) bool { return mode == "sdk-hints" || mode == "sdk-kill" }

// ensureGateway makes sure a gateway with (or without) hints serves.
func (st *stormBench) ensureGateway(ctx context.Context, hints bool) error {
	if st.gw != nil && st.scfg.Hints == hints {
		return nil
	}
	st.stopGateway()
	st.scfg.Hints = hints
	return st.startGateway(ctx)
}

func (st *stormBench) startGateway(ctx context.Context) error {
	gw, ready, err := startServe(ctx, st.env, "gateway", st.scfg)
	if err != nil {
		return fmt.Errorf("start the gateway: %w", err)
	}
	st.gw, st.scfg.Addr = gw, ready.Addr // restarts listen where the clients connect
	return nil
}

func (st *stormBench) stopGateway() {
	if st.gw != nil {
		_ = st.gw.stop(30 * time.Second)
		st.gw = nil
	}
}

// startClients starts the worker processes of one run.
func (st *stormBench) startClients(mi int, mode string) (children, error) {
	cfg := st.cfg
	var ws children
	per := (cfg.Clients + cfg.Workers - 1) / cfg.Workers
	for i := 0; i < cfg.Workers; i++ {
		n := min(per, cfg.Clients-i*per)
		if n <= 0 {
			break
		}
		w, err := st.env.Runner.start(st.env.Progress, fmt.Sprintf("storm-%s-%d", mode, i+1), []string{"worker", "storm"}, stormWorkerConfig{
			Addr: st.scfg.Addr, Secret: st.scfg.Secret, FirstUser: int64(1 + i*per + mi*cfg.Clients), Count: n, Mode: mode,
			SrcIPs: sourceIPs(30+(mi*cfg.Workers+i)*cfg.IPs, cfg.IPs), StablePeriod: cfg.StablePeriod, Nice: cfg.Nice,
			Deadline: 4 * time.Minute})
		if err != nil {
			ws.killAll()
			return nil, err
		}
		ws = append(ws, w)
	}
	return ws, nil
}

// run is one kind of client through one gateway restart.
func (st *stormBench) run(ctx context.Context, mi int, mode string) (StormRun, error) {
	cfg, pr := st.cfg, st.env.Progress
	run := StormRun{Mode: mode, Clients: cfg.Clients}
	if err := st.ensureGateway(ctx, hinted(mode)); err != nil {
		return run, err
	}
	ws, err := st.startClients(mi, mode)
	if err != nil {
		return run, err
	}
	defer ws.killAll()
	progressf(pr, "bench storm: %s: connecting %s clients from %d processes ...", mode, num(float64(cfg.Clients)), len(ws))
	for _, w := range ws {
		var r struct {
			Connected int `json:"connected"`
		}
		if err := w.expectJSON(ctx, "ready", 3*time.Minute, &r); err != nil {
			return run, err
		}
		run.ConnectedAtCut += r.Connected
	}
	hold := cfg.Hold
	if mode == "sdk-kill" {
		hold = max(hold, cfg.KillHold)
	}
	progressf(pr, "bench storm: %s: %d connected; holding %v, then restarting the gateway", mode, run.ConnectedAtCut, hold)
	sleepCtx(ctx, hold)
	cut := time.Now()
	for _, w := range ws {
		if err := w.send("cut " + strconv.FormatInt(cut.UnixNano(), 10)); err != nil {
			return run, err
		}
	}
	if mode == "sdk-kill" {
		st.gw.kill() // kill -9: no close frame, no hint
	} else {
		_ = st.gw.stop(30 * time.Second)
	}
	st.gw = nil
	run.StopSeconds = time.Since(cut).Seconds()
	sleepCtx(ctx, cfg.Down)
	if err := st.startGateway(ctx); err != nil {
		return run, err
	}
	run.Downtime = time.Since(cut).Seconds()
	progressf(pr, "bench storm: %s: gateway back after %.1fs (old one gone after %.1fs); waiting for the clients", mode, run.Downtime, run.StopSeconds)
	series, err := st.collect(ctx, ws, mode, cut)
	if err != nil {
		return run, err
	}
	mergeStorm(&run, cut, series)
	return run, nil
}

// collect waits for the clients to be back (or the timeout), then for the
// tail, and gathers the workers' series.
func (st *stormBench) collect(ctx context.Context, ws children, mode string, cut time.Time) ([]stormSeries, error) {
	deadline := cut.Add(st.cfg.RecoverTimeout)
	for _, w := range ws {
		if _, err := w.expect(ctx, "recovered", max(time.Until(deadline), time.Millisecond)); err != nil {
			progressf(st.env.Progress, "bench storm: %s: %v", mode, err)
			break
		}
	}
	sleepCtx(ctx, st.cfg.Tail)
	for _, w := range ws {
		if err := w.send("stop"); err != nil {
			return nil, err
		}
	}
	var series []stormSeries
	for _, w := range ws {
		var s stormSeries
		if err := w.expectJSON(ctx, "result", time.Minute, &s); err != nil {
			return nil, err
		}
		series = append(series, s)
	}
	for _, w := range ws {
		_ = w.stop(30 * time.Second)
	}
	return series, nil
}

// mergeStorm sums the workers' series on one grid relative to the cut.
func mergeStorm(run *StormRun, cut time.Time, series []stormSeries) {
	if len(series) == 0 {
		return
	}
	b := int64(series[0].BucketMS)
	cutMS := cut.UnixMilli()
	// The grid: from 1 s before the cut.
	// It ends with the shortest series, less its last, partial bucket.
	lo, hi := floorDiv(-1000, b), int64(math.MaxInt64)
	for _, s := range series {
		end := floorDiv(s.StartMS+int64(len(s.Attempts))*b-cutMS, b) - 1
		hi = min(hi, end)
	}
	if hi <= lo {
		return
	}
	n := int(hi - lo)
	att := make([]int64, n)
	conn := make([]int, n)
	recovered, allBack := 0, true
	var recMS int64
	for _, s := range series {
		for i := range s.Attempts {
			k := floorDiv(s.StartMS+int64(i)*b-cutMS, b) - lo
			if k >= 0 && k < int64(n) {
				att[k] += int64(s.Attempts[i])
				conn[k] += int(s.Connected[i])
			}
		}
		recovered += s.Recovered
		run.Polling += s.Polling
		if s.RecoveredMS == 0 {
			allBack = false
		}
		recMS = max(recMS, s.RecoveredMS)
	}
	run.Recovered = recovered
	run.RecoverSeconds = -1
	if allBack {
		run.RecoverSeconds = float64(recMS-cutMS) / 1000
	}
	for k := 0; k < n; k++ {
		t := float64((int64(k)+lo)*b) / 1000
		run.T = append(run.T, t)
		run.Rate = append(run.Rate, float64(att[k])*1000/float64(b))
		run.Connected = append(run.Connected, conn[k])
		if t >= 0 && (run.RecoverSeconds < 0 || t < run.RecoverSeconds) {
			run.Requests += att[k]
		}
	}
	// The peak: the busiest window of one second from the cut on (the
	// last windows run past the record and hold what there is).
	w := int(1000 / b)
	for k := int(-lo); k < n; k++ {
		var s int64
		for j := k; j < min(k+w, n); j++ {
			s += att[j]
		}
		run.PeakPerSec = max(run.PeakPerSec, float64(s))
	}
}

// floorDiv is a/b rounded down (Go's / truncates towards zero).
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
