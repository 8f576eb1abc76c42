package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/projector"
)

// ChangesConfig configures Changes. Zero fields take the defaults in
// brackets.
type ChangesConfig struct {
	// The edits: Conversations of Members (one WebSocket each), Rate
	// edits/s for Seconds, and as the reference sends at the same rate
	// over the same members.
	Conversations int     // [300]
	Members       int     // [7]
	Partitions    int     // [12]
	Rate          float64 // [1000] edits/s, and sends/s of the reference
	Seconds       float64 // [10] length of the edit phase and of the send phase
	WarmupSeconds float64 // [2] a send phase before both, not reported
	DrainSeconds  float64 // [3] wait for the last pushes after a phase
	// DBMaxConns is the gateway's PostgreSQL pool size [0: as `inboxd gateway`
	// without --db-max-conns, gateway.DBMaxConns: max(16, cores)].
	DBMaxConns int
	// The reactions: one conversation of ReactionMembers, one message,
	// ReactionRate reaction changes/s for ReactionSeconds appended
	// straight to the log.
	ReactionMembers int     // [500]
	ReactionRate    float64 // [1000]
	ReactionSeconds float64 // [10]
}

func (c *ChangesConfig) setDefaults() {
	setDefault(&c.Conversations, 300)
	setDefault(&c.Members, 7)
	setDefault(&c.Partitions, 12)
	setDefault(&c.Rate, 1000)
	setDefault(&c.Seconds, 10)
	setDefault(&c.WarmupSeconds, 2)
	setDefault(&c.DrainSeconds, 3)
	setDefault(&c.ReactionMembers, 500)
	setDefault(&c.ReactionRate, 1000)
	setDefault(&c.ReactionSeconds, 10)
}

// ChangesResult is the outcome of Changes.
type ChangesResult struct {
	Conversations int          `json:"conversations"`
	Members       int          `json:"members"`
	Connections   int          `json:"websockets"`
	Send          ChangesPhase `json:"send"` // the reference
	Edit          ChangesPhase `json:"edit"`
	EditVerifyOK  bool         `json:"edit_verify_ok"`
	Reactions     ReactionsRun `json:"reactions"`
	// The 1-minute load average at the start and at the end of the figure:
	// the machine may be shared, and the figure's own processes count in it.
	LoadAtStart float64 `json:"load_average_1m_at_start"`
	LoadAtEnd   float64 `json:"load_average_1m_at_end"`
}

// ReactionsRun is the reactions half of the changes figure.
type ReactionsRun struct {
	Members  int     `json:"members"`
	Offered  float64 `json:"offered_per_sec"`
	Seconds  float64 `json:"seconds"` // of the appends
	Appended int64   `json:"appended"`
	Achieved float64 `json:"achieved_per_sec"`
	// CatchUpSeconds is the time from the last append until the stored
	// offsets reached the end of the log.
	CatchUpSeconds float64 `json:"catch_up_seconds"`
	// Applied are the changes table's rows (one per applied change_id);
	// UpdateEntries the inbox entries of kind update; Batches the fanout
	// batches from the first append until caught up.
	Applied       int64   `json:"applied"`
	UpdateEntries int64   `json:"update_entries"`
	Batches       int64   `json:"fanout_batches"`
	EntriesPerSec float64 `json:"update_entries_per_sec"` // over the appends and the catch-up
	PerReaction   float64 `json:"update_entries_per_reaction"`
	Reactions     int64   `json:"reactions_at_end"`
	VerifyOK      bool    `json:"verify_ok"`
}

// Rows implements Result.
func (r ChangesResult) Rows() []Row {
	var rows []Row
	e, s := r.Edit, r.Send
	if e.Push.N > 0 || s.Push.N > 0 {
		rows = append(rows, Row{
			Figure: fmt.Sprintf("edit -> WebSocket push at %s edits/s offered (HTTP PATCH; %d members, the %d others timed), p50 / p90 / p99 / max",
				num(e.Offered), r.Members, r.Members-1),
			Value: fmt.Sprintf("%s / %s / %s / %s", ms(e.Push.P50), ms(e.Push.P90), ms(e.Push.P99), ms(e.Push.Max)),
			Reference: fmt.Sprintf("send -> WebSocket push at %s msg/s, same members, same run: %s / %s / %s / %s",
				num(s.Offered), ms(s.Push.P50), ms(s.Push.P90), ms(s.Push.P99), ms(s.Push.Max)),
			Ratio: fmt.Sprintf("p50 %s, p99 %s", ratio(e.Push.P50, s.Push.P50), ratio(e.Push.P99, s.Push.P99)),
		}, Row{
			Figure: "edits achieved (answered 200/202), pushes timed of those expected",
			Value:  fmt.Sprintf("%s edits/s, %s of %s pushes%s", num(e.Achieved), num(float64(e.Received)), num(float64(e.Expected)), phaseTrouble(e)),
			Reference: fmt.Sprintf("sends: %s msg/s, %s of %s pushes%s", num(s.Achieved), num(float64(s.Received)), num(float64(s.Expected)),
				phaseTrouble(s)),
			Ratio: ratio(e.Achieved, s.Achieved),
		})
	}
	if ec, sc := e.cpuPerRequest(), s.cpuPerRequest(); ec > 0 && sc > 0 {
		rows = append(rows, Row{
			Figure:    "CPU per edit (" + e.serverGroups() + ", over the phase and its drain)",
			Value:     ms(ec),
			Reference: "CPU per send, same members, same run: " + ms(sc),
			Ratio:     ratio(ec, sc),
		})
	}
	x := r.Reactions
	if x.Appended > 0 {
		verdict := "projector.Verify OK"
		if !x.VerifyOK {
			verdict = "projector.Verify FAILED"
		}
		rows = append(rows, Row{
			Figure: fmt.Sprintf("update entries written for %s reactions/s offered on one message, %d members (%.0fs)", num(x.Offered), x.Members, x.Seconds),
			Value: fmt.Sprintf("%s entries/s = %.1f per reaction (%s entries for %s reactions applied, %s fanout batches, caught up %.1fs after the last append; %s)",
				num(x.EntriesPerSec), x.PerReaction, num(float64(x.UpdateEntries)), num(float64(x.Applied)), num(float64(x.Batches)), x.CatchUpSeconds, verdict),
			Reference: fmt.Sprintf("one entry per member per reaction (no coalescing): %d per reaction = %s entries/s", x.Members, num(float64(x.Members)*x.Achieved)),
			Ratio:     ratio(x.PerReaction, float64(x.Members)),
		})
	}
	return rows
}

// cpuPerRequest is the CPU milliseconds of the server side (everything but
// the load generator) per answered request; 0 when unknown.
func (p ChangesPhase) cpuPerRequest() float64 {
	var secs float64
	for _, c := range p.CPU {
		if c.Group != "load generator" {
			secs += c.Seconds
		}
	}
	return div(secs*1000, float64(p.Applied+p.Pending))
}

// serverGroups names the process groups cpuPerRequest counts.
func (p ChangesPhase) serverGroups() string {
	var g []string
	for _, c := range p.CPU {
		if c.Group != "load generator" {
			g = append(g, c.Group)
		}
	}
	return strings.Join(g, ", ")
}

// phaseTrouble names what went wrong in a phase, if anything.
func phaseTrouble(p ChangesPhase) string {
	var s string
	if p.Errors > 0 {
		s += fmt.Sprintf(", %d errors (%s)", p.Errors, p.FirstErr)
	}
	if p.Dropped > 0 {
		s += fmt.Sprintf(", %d dropped at the in-flight cap", p.Dropped)
	}
	if p.Reconnects > 0 {
		s += fmt.Sprintf(", %d reconnects", p.Reconnects)
	}
	return s
}

// Changes measures the changes of a message (edits, deletes, reactions):
// the latency from an edit (HTTP PATCH, the worker's clock) to the push of
// the update entry on the WebSocket of each other member, next to the
// latency of a send at the same rate over the same members in the same
// run; then the inbox
// entries the projection writes for a burst of reactions on one message of
// a large conversation, next to one entry per member per reaction. The
// gateway and the load generator run as child processes as in E2E; fanout
// and kfake run in the orchestrator. Each half has a database and a log of
// its own, checked with projector.Verify at the end.
func Changes(ctx context.Context, env *Env, cfg ChangesConfig) (ChangesResult, error) {
	cfg.setDefaults()
	res := ChangesResult{Conversations: cfg.Conversations, Members: cfg.Members, LoadAtStart: loadAverage()}
	progressf(env.Progress, "bench changes: load average %.2f", res.LoadAtStart)
	err := changesEdits(ctx, env, cfg, &res)
	if err == nil {
		err = changesReactions(ctx, env, cfg, &res.Reactions)
	}
	res.LoadAtEnd = loadAverage()
	progressf(env.Progress, "bench changes: load average %.2f at the end", res.LoadAtEnd)
	return res, err
}

// verifyProjection runs projector.Verify; a failed check is an error that
// names the checks.
func verifyProjection(ctx context.Context, pl *pipeline) error {
	rep, err := projector.Verify(ctx, pl.pool)
	if err != nil {
		return err
	}
	if !rep.OK() {
		var b bytes.Buffer
		rep.Print(&b)
		return fmt.Errorf("projector.Verify failed:\n%s", b.String())
	}
	return nil
}

func changesEdits(ctx context.Context, env *Env, cfg ChangesConfig, res *ChangesResult) error {
	pr := env.Progress
	pl, err := env.newPipeline(ctx, "edits", cfg.Partitions)
	if err != nil {
		return err
	}
	defer pl.Close()
	reg, stopFanout, err := pl.startFanout(ctx, env, fanout.Config{})
	if err != nil {
		return err
	}
	defer stopFanout()
	convs, err := appendConversations(ctx, pl.prod, cfg.Conversations, cfg.Members)
	if err != nil {
		return err
	}
	if err := testenv.WaitCaughtUp(ctx, pl.pool, pl.prod, 2*time.Minute); err != nil {
		return err
	}
	secret := randomSecret()
	gw, ready, err := startServe(ctx, env, "gateway", serveConfig{Mode: "gateway", DatabaseURL: pl.url, Brokers: pl.brokers,
		Partitions: cfg.Partitions, Secret: secret, MaxConns: 19000, DBMaxConns: cfg.DBMaxConns})
	if err != nil {
		return err
	}
	defer gw.kill()
	wk, err := env.Runner.start(pr, "changes-load", []string{"worker", "changes"}, changesWorkerConfig{
		Addr: ready.Addr, Secret: secret, Convs: convs, SrcIPs: sourceIPs(2, 4), Deadline: 20 * time.Minute})
	if err != nil {
		return err
	}
	defer wk.kill()
	var rd struct {
		Connections int `json:"connections"`
	}
	if err := wk.expectJSON(ctx, "ready", 3*time.Minute, &rd); err != nil {
		return err
	}
	res.Connections = rd.Connections
	progressf(pr, "bench changes: %d conversations of %d members, %d WebSockets, a first message in each", cfg.Conversations, cfg.Members, rd.Connections)

	groups := map[string]func() []int{
		"gateway":        func() []int { return []int{ready.Pid} },
		"fanout + kfake": func() []int { return []int{os.Getpid()} },
		"load generator": func() []int { return []int{wk.pid()} },
		"PostgreSQL":     env.postgresPids,
	}
	if env.PGData == "" {
		delete(groups, "PostgreSQL")
	}
	run := func(name, mode string, secs float64) (ChangesPhase, error) {
		progressf(pr, "bench changes: %s: offering %s %ss/s for %gs ...", name, num(cfg.Rate), mode, secs)
		cmd, _ := json.Marshal(changesPhaseCmd{Name: name, Mode: mode, Rate: cfg.Rate, Seconds: secs, DrainSeconds: cfg.DrainSeconds})
		f0 := gatherFanout(reg)
		meter := newCPUMeter(groups)
		t0 := time.Now()
		if err := wk.send("phase " + string(cmd)); err != nil {
			return ChangesPhase{}, err
		}
		var p ChangesPhase
		if err := wk.expectJSON(ctx, "result", time.Duration(secs+cfg.DrainSeconds+120)*time.Second, &p); err != nil {
			return p, err
		}
		p.CPU = meter.stop()
		if f1 := gatherFanout(reg); f1.batches > f0.batches {
			p.FanoutBusy = (f1.seconds - f0.seconds) / time.Since(t0).Seconds()
			p.FanoutBatchMs = (f1.seconds - f0.seconds) / (f1.batches - f0.batches) * 1000
			p.FanoutPerBatch = (f1.records - f0.records) / (f1.batches - f0.batches)
		}
		var cpu []string
		for _, c := range p.CPU {
			cpu = append(cpu, fmt.Sprintf("%s %.2f", c.Group, c.Cores))
		}
		progressf(pr, "bench changes: %s: achieved %s/s, push p50 %s p99 %s max %s (request p50 %s p99 %s), %d/%d pushes%s; fanout busy %.0f%%, batches of %.1f records in %s; cores: %s",
			name, num(p.Achieved), ms(p.Push.P50), ms(p.Push.P99), ms(p.Push.Max), ms(p.Request.P50), ms(p.Request.P99),
			p.Received, p.Expected, phaseTrouble(p), p.FanoutBusy*100, p.FanoutPerBatch, ms(p.FanoutBatchMs), strings.Join(cpu, ", "))
		return p, nil
	}
	if cfg.WarmupSeconds > 0 {
		if _, err := run("warm-up", "send", cfg.WarmupSeconds); err != nil {
			return err
		}
	}
	if res.Send, err = run("sends", "send", cfg.Seconds); err != nil {
		return err
	}
	if res.Edit, err = run("edits", "edit", cfg.Seconds); err != nil {
		return err
	}
	_ = wk.send("quit")
	_ = wk.stop(10 * time.Second)
	_ = gw.stop(20 * time.Second)
	if err := testenv.WaitCaughtUp(ctx, pl.pool, pl.prod, 2*time.Minute); err != nil {
		return err
	}
	if err := verifyProjection(ctx, pl); err != nil {
		return fmt.Errorf("after the edits: %w", err)
	}
	res.EditVerifyOK = true
	return nil
}

// reactionEmoji are the emoji the members cycle through.
var reactionEmoji = []string{"👍", "🎉", "❤️", "😂"}

func changesReactions(ctx context.Context, env *Env, cfg ChangesConfig, x *ReactionsRun) error {
	pr := env.Progress
	x.Members, x.Offered = cfg.ReactionMembers, cfg.ReactionRate
	pl, err := env.newPipeline(ctx, "reactions", cfg.Partitions)
	if err != nil {
		return err
	}
	defer pl.Close()
	reg, stopFanout, err := pl.startFanout(ctx, env, fanout.Config{})
	if err != nil {
		return err
	}
	defer stopFanout()
	const conv = 1
	members := make([]int64, cfg.ReactionMembers)
	for i := range members {
		members[i] = int64(i + 1)
	}
	e := events.New(events.ConversationCreated, conv, members[0])
	e.Title = "bench reactions"
	e.Members = members[1:]
	if _, err := pl.prod.Append(ctx, e); err != nil {
		return fmt.Errorf("create the conversation: %w", err)
	}
	e = events.New(events.MessageSent, conv, members[0])
	e.MsgID = uuid.NewString()
	e.Body = events.Ptr("react to this")
	if _, err := pl.prod.Append(ctx, e); err != nil {
		return fmt.Errorf("send the message: %w", err)
	}
	if err := testenv.WaitCaughtUp(ctx, pl.pool, pl.prod, 2*time.Minute); err != nil {
		return err
	}
	var seq, before int64
	if err := pl.pool.QueryRow(ctx, `SELECT seq FROM messages WHERE conversation_id = $1 AND msg_id = $2`, conv, e.MsgID).Scan(&seq); err != nil {
		return fmt.Errorf("the message's seq: %w", err)
	}
	if err := pl.pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE kind = 3`).Scan(&before); err != nil {
		return err
	}
	progressf(pr, "bench changes: a conversation of %d members and its message (seq %d); offering %s reaction changes/s for %gs ...",
		cfg.ReactionMembers, seq, num(cfg.ReactionRate), cfg.ReactionSeconds)

	// Each member in turn: add an emoji, replace it with another, remove
	// it; every change changes the state, and the end state is known.
	steps := make([]int, len(members))
	errs := make(chan error, 1)
	f0 := gatherFanout(reg)
	start := time.Now()
	pace(ctx, start, start.Add(time.Duration(cfg.ReactionSeconds*float64(time.Second))), cfg.ReactionRate, func(i int) {
		m := i % len(members)
		k := steps[m]
		steps[m]++
		var ev *events.Event
		switch k % 3 {
		case 0:
			ev = events.New(events.ReactionAdded, conv, members[m])
			ev.Emoji = reactionEmoji[(k/3+m)%len(reactionEmoji)]
		case 1:
			ev = events.New(events.ReactionAdded, conv, members[m])
			ev.Emoji = reactionEmoji[(k/3+m+1)%len(reactionEmoji)]
		default:
			ev = events.New(events.ReactionRemoved, conv, members[m])
		}
		ev.ChangeID, ev.Seq = uuid.NewString(), seq
		x.Appended++
		pl.prod.AppendAsync(ctx, ev, func(_ producer.Position, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	})
	x.Seconds = time.Since(start).Seconds()
	x.Achieved = float64(x.Appended) / x.Seconds
	last := time.Now()
	if err := testenv.WaitCaughtUp(ctx, pl.pool, pl.prod, 5*time.Minute); err != nil {
		return err
	}
	x.CatchUpSeconds = time.Since(last).Seconds()
	select {
	case err := <-errs:
		return fmt.Errorf("append a reaction: %w", err)
	default:
	}
	f1 := gatherFanout(reg)
	x.Batches = int64(f1.batches - f0.batches)
	var after int64
	err = pl.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM inbox WHERE kind = 3), (SELECT count(*) FROM changes),
(SELECT count(*) FROM reactions)`).Scan(&after, &x.Applied, &x.Reactions)
	if err != nil {
		return err
	}
	x.UpdateEntries = after - before
	x.EntriesPerSec = float64(x.UpdateEntries) / (x.Seconds + x.CatchUpSeconds)
	x.PerReaction = div(float64(x.UpdateEntries), float64(x.Applied))
	progressf(pr, "bench changes: %d reactions appended at %s/s, %d applied, %d update entries (%.1f per reaction) in %d fanout batches, caught up %.1fs after the last",
		x.Appended, num(x.Achieved), x.Applied, x.UpdateEntries, x.PerReaction, x.Batches, x.CatchUpSeconds)

	// The end state: the reactions the members' last changes leave, and
	// the message's counts equal to the reactions table (Verify, M5).
	var want int64
	for _, k := range steps {
		if k%3 != 0 {
			want++
		}
	}
	if x.Applied != x.Appended {
		return fmt.Errorf("reactions: %d appended but %d applied", x.Appended, x.Applied)
	}
	if x.Reactions != want {
		return fmt.Errorf("reactions: %d in the reactions table, %d expected from the members' last changes", x.Reactions, want)
	}
	if err := verifyProjection(ctx, pl); err != nil {
		return fmt.Errorf("after the reactions: %w", err)
	}
	x.VerifyOK = true
	return nil
}
