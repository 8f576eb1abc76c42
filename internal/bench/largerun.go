package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/protocol"
)

// Large measures the figures of read fan-out (docs/large-conversations.md):
// the build of an N-member conversation by bulk add; send -> push latency
// to C connected members of it at R msg/s while S small conversations
// carry a normal load, and the small conversations' latency against the
// same load alone; the inbox rows per message of the large conversation;
// that each connected member got every message once and in order, and
// that an offline member catches up; and the cost of GET /v1/sync for a
// member of 50 read-mode channels against a member of none.
func Large(ctx context.Context, env *Env, cfg LargeConfig) (LargeResult, error) {
	cfg.setDefaults()
	res := LargeResult{Config: cfg, LoadAtStart: loadAverage()}
	if err := cfg.check(); err != nil {
		return res, err
	}
	progressf(env.Progress, "bench large: N=%d members, C=%d connected, R=%g msg/s, D=%gs, S=%d small conversations at %g msg/s; load average %.2f",
		cfg.Members, cfg.Connected, cfg.Rate, cfg.Seconds, cfg.Small, cfg.SmallRate, res.LoadAtStart)
	pl, err := env.newPipeline(ctx, "large", cfg.Partitions)
	if err != nil {
		return res, err
	}
	defer pl.Close()
	_, stopFanout, err := pl.startFanout(ctx, env, fanout.Config{LargeThreshold: cfg.LargeThreshold})
	if err != nil {
		return res, err
	}
	defer stopFanout()
	small, smallRecv, err := largeSmallConversations(ctx, pl, cfg)
	if err != nil {
		return res, err
	}
	r := &largeRun{env: env, cfg: cfg, pl: pl, res: &res}
	defer r.kill()
	if err := r.run(ctx, small, smallRecv); err != nil {
		return res, err
	}
	res.LoadAtEnd = loadAverage()
	return res, nil
}

func (c LargeConfig) check() error {
	if c.Connected+c.Senders+2 > c.Members {
		return fmt.Errorf("bench large: %d members cannot hold %d connected, %d senders and an offline one", c.Members, c.Connected, c.Senders)
	}
	if c.SmallMembers < 2 {
		return errors.New("bench large: small conversations need 2 members at least")
	}
	return nil
}

// largeSmallConversations appends the small conversations (a few members
// each) straight to the log; it returns them with their sender and
// connected member, and the connected members.
func largeSmallConversations(ctx context.Context, pl *pipeline, cfg LargeConfig) ([]e2eConv, []int64, error) {
	small := make([]e2eConv, cfg.Small)
	var recv []int64
	for i := range small {
		c := e2eConv{ID: int64(largeSmallConv + i)}
		var all []int64
		for k := 0; k < cfg.SmallMembers; k++ {
			all = append(all, int64(largeSmallBase+i*cfg.SmallMembers+k))
		}
		c.Members = all[:2] // the sender, then the connected member
		recv = append(recv, all[1])
		small[i] = c
		e := events.New(events.ConversationCreated, c.ID, all[0])
		e.Title = "small"
		e.Members = all[1:]
		if _, err := pl.prod.Append(ctx, e); err != nil {
			return nil, nil, fmt.Errorf("create small conversation %d: %w", c.ID, err)
		}
	}
	if err := testenv.WaitCaughtUp(ctx, pl.pool, pl.prod, 5*time.Minute); err != nil {
		return nil, nil, err
	}
	return small, recv, nil
}

// largeRun is a run of the large figure: the gateway, the load
// generators, the large conversation and the result the steps fill in.
type largeRun struct {
	env *Env
	cfg LargeConfig
	pl  *pipeline
	res *LargeResult

	gw     *child
	ready  serveReady
	secret string
	api    *largeAPI
	cid    int64 // the large conversation
	recvs  children
	sender *child
}

// run is the figure after its set-up, step by step.
func (r *largeRun) run(ctx context.Context, small []e2eConv, smallRecv []int64) error {
	if err := r.startGateway(ctx); err != nil {
		return err
	}
	if err := r.build(ctx); err != nil {
		return err
	}
	withCh, without, err := r.syncUsers(ctx)
	if err != nil {
		return err
	}
	if err := r.startWorkers(ctx, small, smallRecv); err != nil {
		return err
	}
	if err := r.phases(ctx); err != nil {
		return err
	}
	if err := r.collect(ctx); err != nil {
		return err
	}
	res := r.res
	if err := largeCatchUp(ctx, r.api, r.cid, int64(r.cfg.Connected+2), res.BaseSeq, &res.Offline); err != nil {
		return fmt.Errorf("catch-up: %w", err)
	}
	// GET /v1/sync with and without read-mode conversations, in turn.
	if res.SyncWith, res.SyncWithout, res.SyncListed, err = largeTimeSync(ctx, r.api, withCh, without, r.cfg.SyncRequests); err != nil {
		return err
	}
	progressf(r.env.Progress, "bench large: sync with %d channels (listed %d) p50 %s p99 %s; without p50 %s p99 %s",
		r.cfg.Channels, res.SyncListed, ms(res.SyncWith.P50), ms(res.SyncWith.P99), ms(res.SyncWithout.P50), ms(res.SyncWithout.P99))
	for _, c := range r.recvs {
		_ = c.stop(30 * time.Second)
	}
	_ = r.sender.stop(10 * time.Second)
	_ = r.gw.stop(20 * time.Second)
	return nil
}

// kill ends the children that are still running.
func (r *largeRun) kill() {
	r.sender.kill()
	r.recvs.killAll()
	r.gw.kill()
}

func (r *largeRun) startGateway(ctx context.Context) error {
	cfg := r.cfg
	r.secret = randomSecret()
	var err error
	r.gw, r.ready, err = startServe(ctx, r.env, "gateway", serveConfig{Mode: "gateway", DatabaseURL: r.pl.url, Brokers: r.pl.brokers,
		Partitions: cfg.Partitions, Secret: r.secret, MaxConns: cfg.Connected + cfg.Small + 500, DBMaxConns: cfg.DBMaxConns,
		LargePushRate: cfg.LargePushRate, Deadline: 2 * time.Hour})
	if err != nil {
		return err
	}
	r.api = &largeAPI{addr: r.ready.Addr, secret: []byte(r.secret), tokens: map[int64]string{},
		client: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: sourceDialer(nil, 10*time.Second)}}}
	return nil
}

// build: user 1 creates the conversation, then adds 2..N, 1,000 per
// request, until the fanout has projected it all.
func (r *largeRun) build(ctx context.Context) error {
	cfg, res, pool := r.cfg, r.res, r.pl.pool
	t0 := time.Now()
	var created protocol.ConversationCreated
	if _, err := r.api.do(ctx, "POST", "/v1/conversations", 1, map[string]any{"title": "large"}, &created); err != nil {
		return err
	}
	r.cid = created.ConversationID
	var rows0 int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM inbox`).Scan(&rows0); err != nil {
		return err
	}
	var batches [][]int64
	for u := int64(2); u <= int64(cfg.Members); u += 1000 {
		var b []int64
		for v := u; v < u+1000 && v <= int64(cfg.Members); v++ {
			b = append(b, v)
		}
		batches = append(batches, b)
	}
	res.BuildRequests = len(batches)
	if err := r.bulkAdd(ctx, batches); err != nil {
		return fmt.Errorf("bulk add: %w", err)
	}
	if err := testenv.WaitCaughtUp(ctx, pool, r.pl.prod, 10*time.Minute); err != nil {
		return err
	}
	res.BuildSeconds = time.Since(t0).Seconds()
	var rows1 int64
	if err := pool.QueryRow(ctx, `SELECT member_count, read_fanout, (SELECT count(*) FROM inbox) FROM conversations WHERE id = $1`, r.cid).
		Scan(&res.MemberCount, &res.ReadFanout, &rows1); err != nil {
		return err
	}
	res.BuildRows = rows1 - rows0
	progressf(r.env.Progress, "bench large: conversation %d of %d members (read mode %v) built in %.1fs, %d inbox rows",
		r.cid, res.MemberCount, res.ReadFanout, res.BuildSeconds, res.BuildRows)
	if res.MemberCount != int64(cfg.Members) {
		return fmt.Errorf("bench large: %d members after the build, want %d", res.MemberCount, cfg.Members)
	}
	return nil
}

// bulkAdd sends the batches of members, BuildConcurrency requests in
// flight.
func (r *largeRun) bulkAdd(ctx context.Context, batches [][]int64) error {
	var next atomic.Int64
	eg, ectx := errgroup.WithContext(ctx)
	for w := 0; w < r.cfg.BuildConcurrency; w++ {
		eg.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(batches) {
					return nil
				}
				if _, err := r.api.do(ectx, "POST", fmt.Sprintf("/v1/conversations/%d/members", r.cid), 1,
					map[string]any{"user_ids": batches[i]}, nil); err != nil {
					return err
				}
			}
		})
	}
	return eg.Wait()
}

// syncUsers makes the users of the timed syncs: one member of Channels
// channels, one of as many write-mode conversations. It notes the large
// conversation's seq before the run.
func (r *largeRun) syncUsers(ctx context.Context) (withCh, without int64, err error) {
	owner, withCh, without := int64(largeSyncBase), int64(largeSyncBase+1), int64(largeSyncBase+2)
	for i := 0; i < r.cfg.Channels; i++ {
		if _, err := r.api.do(ctx, "POST", "/v1/conversations", owner, map[string]any{"title": fmt.Sprintf("channel %d", i), "channel": true, "members": []int64{withCh}}, nil); err != nil {
			return 0, 0, err
		}
		if _, err := r.api.do(ctx, "POST", "/v1/conversations", owner, map[string]any{"title": fmt.Sprintf("group %d", i), "members": []int64{without}}, nil); err != nil {
			return 0, 0, err
		}
	}
	if err := testenv.WaitCaughtUp(ctx, r.pl.pool, r.pl.prod, 5*time.Minute); err != nil {
		return 0, 0, err
	}
	if err := r.pl.pool.QueryRow(ctx, `SELECT last_seq FROM conversations WHERE id = $1`, r.cid).Scan(&r.res.BaseSeq); err != nil {
		return 0, 0, err
	}
	return withCh, without, nil
}

// startWorkers starts the receivers and the sender and waits until every
// WebSocket is up and the gateway has published every connected user
// online. The connected large members are spread evenly over Workers
// processes (at the lower priority cfg.Nice), the small conversations'
// connected members go to one more process of their own at the normal
// priority.
func (r *largeRun) startWorkers(ctx context.Context, small []e2eConv, smallRecv []int64) error {
	cfg, res, pr := r.cfg, r.res, r.env.Progress
	recvUsers := make([][]int64, cfg.Workers+1)
	for i := 0; i < cfg.Connected; i++ {
		recvUsers[i%cfg.Workers] = append(recvUsers[i%cfg.Workers], int64(2+i))
	}
	recvUsers[cfg.Workers] = append(recvUsers[cfg.Workers], smallRecv...)
	heads, err := r.heads(ctx, recvUsers)
	if err != nil {
		return err
	}
	tc := time.Now()
	for w := range recvUsers {
		name, nice := fmt.Sprintf("large-recv-%d", w+1), cfg.Nice
		if w == cfg.Workers {
			name, nice = "small-recv", 0
		}
		c, err := r.env.Runner.start(pr, name, []string{"worker", "large"}, largeWorkerConfig{
			Role: "recv", Addr: r.ready.Addr, Secret: r.secret, Users: recvUsers[w], Heads: headsOf(recvUsers[w], heads), LargeConv: r.cid,
			SrcIPs: sourceIPs(10+2*w, 2), Nice: nice, Deadline: time.Hour})
		if err != nil {
			return err
		}
		r.recvs = append(r.recvs, c)
	}
	var senders []int64
	for i := 0; i < cfg.Senders; i++ {
		senders = append(senders, int64(cfg.Members-i))
	}
	if r.sender, err = r.env.Runner.start(pr, "large-send", []string{"worker", "large"}, largeWorkerConfig{
		Role: "send", Addr: r.ready.Addr, Secret: r.secret, LargeConv: r.cid, LargeSenders: senders, Small: small,
		SrcIPs: sourceIPs(8, 2), Deadline: time.Hour}); err != nil {
		return err
	}
	if _, err := r.sender.expect(ctx, "ready", time.Minute); err != nil {
		return err
	}
	for _, c := range r.recvs {
		var rd struct {
			Connections int `json:"connections"`
			Retries     int `json:"retries"`
		}
		if err := c.expectJSON(ctx, "ready", 10*time.Minute, &rd); err != nil {
			return err
		}
		res.Connections += rd.Connections
		res.ConnectRetries += rd.Retries
	}
	res.ConnectSeconds = time.Since(tc).Seconds()
	res.LargeConnected = cfg.Connected
	progressf(pr, "bench large: %d WebSockets connected in %.1fs (%d of the large conversation's members) from %d processes, %d hellos tried again",
		res.Connections, res.ConnectSeconds, cfg.Connected, len(r.recvs), res.ConnectRetries)
	tp := time.Now()
	online, err := waitPresence(ctx, r.ready.Addr, res.Connections, 5*time.Minute)
	if err != nil {
		return err
	}
	res.PresenceSeconds = time.Since(tc).Seconds()
	progressf(pr, "bench large: presence: %d users published online %.1fs after the first connect (waited %.1fs more); the phases start now",
		online, res.PresenceSeconds, time.Since(tp).Seconds())
	return nil
}

// heads are the receivers' inbox heads: each says hello with its own, as
// a client that was connected before.
func (r *largeRun) heads(ctx context.Context, recvUsers [][]int64) (map[int64]int64, error) {
	var all []int64
	for _, us := range recvUsers {
		all = append(all, us...)
	}
	rs, err := r.pl.pool.Query(ctx, `SELECT id, inbox_seq FROM users WHERE id = ANY($1)`, all)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	heads := map[int64]int64{}
	for rs.Next() {
		var u, h int64
		if err := rs.Scan(&u, &h); err != nil {
			return nil, err
		}
		heads[u] = h
	}
	return heads, rs.Err()
}

// cpuGroups are the process groups the CPU meters read.
func (r *largeRun) cpuGroups() map[string]func() []int {
	groups := map[string]func() []int{
		cpuGroupGateway: func() []int { return []int{r.ready.Pid} },
		cpuGroupFanout:  func() []int { return []int{os.Getpid()} },
		"load generators (child processes)": func() []int {
			p := []int{r.sender.pid()}
			for _, c := range r.recvs {
				p = append(p, c.pid())
			}
			return p
		},
		"PostgreSQL (all its processes)": r.env.postgresPids,
	}
	if r.env.PGData == "" {
		delete(groups, "PostgreSQL (all its processes)")
	}
	return groups
}

// phases settles the database and runs the reference phase (the small
// conversations' load alone), then the same with the large
// conversation's traffic.
func (r *largeRun) phases(ctx context.Context) error {
	// The build wrote about 7 inbox rows per member and the members
	// themselves: without a settle, autovacuum and the checkpointer do
	// that work during the first phase and the reference measures them
	// (docs/benchmarks.md, "Large conversations").
	took, err := r.pl.settle(ctx)
	if err != nil {
		return err
	}
	progressf(r.env.Progress, "bench large: settled (VACUUM ANALYZE, CHECKPOINT) in %.1fs", took.Seconds())
	groups := r.cpuGroups()
	p, err := r.phase(ctx, groups, 0, "reference (small conversations only)", 0)
	if err != nil {
		return err
	}
	r.res.Phases = append(r.res.Phases, p)
	if p, err = r.phase(ctx, groups, 1, "with the large conversation", r.cfg.Rate); err != nil {
		return err
	}
	r.res.Phases = append(r.res.Phases, p)
	return r.pl.pool.QueryRow(ctx, `SELECT last_seq FROM conversations WHERE id = $1`, r.cid).Scan(&r.res.FinalSeq)
}

// phase runs one phase in the sender, then waits for its pushes and the
// fanout and counts the inbox rows it wrote.
func (r *largeRun) phase(ctx context.Context, groups map[string]func() []int, idx int, name string, largeRate float64) (LargePhase, error) {
	cfg, pr := r.cfg, r.env.Progress
	p := LargePhase{Name: name}
	all0, large0, err := r.countRows(ctx)
	if err != nil {
		return p, err
	}
	progressf(pr, "bench large: %s: %g msg/s into the large conversation, %g msg/s into the small ones, for %gs ...", name, largeRate, cfg.SmallRate, cfg.Seconds)
	meter := newCPUMeter(groups)
	load := loadAverage()
	if cfg.Profile {
		defer largeProfiles(ctx, r.env, r.pl.pool, r.ready.Ctl, idx, cfg.Seconds)()
	}
	cmd, _ := json.Marshal(largePhaseCmd{Idx: idx, LargeRate: largeRate, SmallRate: cfg.SmallRate, Seconds: cfg.Seconds})
	if err := r.sender.send("phase " + string(cmd)); err != nil {
		return p, err
	}
	if err := r.sender.expectJSON(ctx, "result", time.Duration(cfg.Seconds+300)*time.Second, &p.Send); err != nil {
		return p, err
	}
	p.CPU = meter.stop()
	p.LargeExpected = p.Send.LargeOK * int64(cfg.Connected)
	p.SmallExpected = p.Send.SmallPushN
	if p.LoadMax, err = r.drain(ctx, &p, idx, load); err != nil {
		return p, err
	}
	if err := testenv.WaitCaughtUp(ctx, r.pl.pool, r.pl.prod, 5*time.Minute); err != nil {
		return p, err
	}
	all1, large1, err := r.countRows(ctx)
	if err != nil {
		return p, err
	}
	p.InboxRows, p.LargeRows = all1-all0, large1-large0
	progressf(pr, "bench large: %s: sent %d large + %d small (%d dropped, %d errors: %s), pushes %d/%d large, %d/%d small; %d inbox rows (%d of the large conversation); load average %.2f",
		name, p.Send.LargeOK, p.Send.SmallOK, p.Send.Dropped, p.Send.Errors, p.Send.FirstErr, p.LargeReceived, p.LargeExpected, p.SmallReceived, p.SmallExpected,
		p.InboxRows, p.LargeRows, p.LoadMax)
	return p, nil
}

// drain waits up to DrainSeconds for the phase's pushes to arrive; it
// returns the highest load average seen since load.
func (r *largeRun) drain(ctx context.Context, p *LargePhase, idx int, load float64) (float64, error) {
	end := time.Now().Add(time.Duration(r.cfg.DrainSeconds * float64(time.Second)))
	for {
		c, err := r.counts(ctx)
		if err != nil {
			return load, err
		}
		p.LargeReceived, p.SmallReceived = c.Large[idx], c.Small[idx]
		load = max(load, loadAverage())
		if (p.LargeReceived >= p.LargeExpected && p.SmallReceived >= p.SmallExpected) || time.Now().After(end) {
			return max(load, loadAverage()), nil
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// counts adds up the receivers' bench pushes so far, per phase.
func (r *largeRun) counts(ctx context.Context) (largeCounts, error) {
	tot := largeCounts{Large: map[int]int64{}, Small: map[int]int64{}}
	for _, c := range r.recvs {
		if err := c.send("count"); err != nil {
			return tot, err
		}
		var lc largeCounts
		// A receiver far behind answers late: its commands wait behind
		// its frames on a starved machine.
		if err := c.expectJSON(ctx, "count", 5*time.Minute, &lc); err != nil {
			return tot, err
		}
		for p, n := range lc.Large {
			tot.Large[p] += n
		}
		for p, n := range lc.Small {
			tot.Small[p] += n
		}
	}
	return tot, nil
}

// countRows counts the inbox rows, all and the large conversation's.
func (r *largeRun) countRows(ctx context.Context) (all, large int64, err error) {
	err = r.pl.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE conversation_id = $1) FROM inbox`, r.cid).Scan(&all, &large)
	return all, large, err
}

// collect reads every receiver's report (the latency histograms and the
// seq checks), merges them into the result, and lets the workers go.
func (r *largeRun) collect(ctx context.Context) error {
	res := r.res
	largeHist, smallHist := map[int]*logHist{}, map[int]*logHist{}
	for _, c := range r.recvs {
		if err := c.send(fmt.Sprintf("report %d", res.FinalSeq)); err != nil {
			return err
		}
		var rr largeRecvResult
		if err := c.expectJSON(ctx, "result", 5*time.Minute, &rr); err != nil {
			return err
		}
		mergeHists(largeHist, rr.LargeHist)
		mergeHists(smallHist, rr.SmallHist)
		d := &res.Delivery
		d.Sessions += rr.Sessions
		d.Reconnects += rr.Reconnects
		d.LargeEntries += rr.LargeEntries
		d.TooLong += rr.TooLong
		mergeSeq(&d.Large, rr.Large)
		mergeSeq(&d.Small, rr.Small)
	}
	for i := range res.Phases {
		if h := largeHist[i]; h != nil {
			res.Phases[i].LargePush = h.dist()
		}
		if h := smallHist[i]; h != nil {
			res.Phases[i].SmallPush = h.dist()
		}
	}
	for _, c := range r.recvs {
		_ = c.send("quit")
	}
	_ = r.sender.send("quit")
	return nil
}
