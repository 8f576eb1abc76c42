package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/protocol"
)

// LargeConfig configures Large (issue 21, docs/large-conversations.md).
// Zero fields take the defaults in brackets.
type LargeConfig struct {
	Members   int     // [100000] N: members of the large conversation, built by bulk add
	Connected int     // [15000; negative: none] C: of them connected to the gateway over WebSocket ("large": true)
	Rate      float64 // [100] R: messages/s sent into the large conversation
	Seconds   float64 // [60] D: length of each phase (the reference, then with the large traffic)
	Small     int     // [2000] S: small conversations carrying a normal load
	// SmallMembers are the members of a small conversation [3]: the first
	// sends, the second is connected, the others are not.
	SmallMembers int
	SmallRate    float64 // [100] messages/s over all the small conversations
	// Senders of the large conversation: members never connected, so
	// that no sender exceeds the gateway's per-user send rate [20].
	Senders          int
	BuildConcurrency int // [4] bulk-add requests in flight
	Channels         int // [50] read-mode conversations (channels) of the user whose sync is timed
	SyncRequests     int // [400] timed GET /v1/sync per user (paced under the per-user rate)
	Workers          int // [0: one per 8,000 WebSockets, at least 2] processes receiving the large conversation
	// Nice is the scheduling priority of the large conversation's
	// receiving processes [10; negative: 0]. They stand for devices on
	// other machines: here they share the gateway's two cores, and at
	// normal priority the acceptance's comparison measures them as much
	// as the gateway. The small conversations' receivers (one process)
	// and the sender keep the normal priority, as in the reference phase.
	Nice           int
	DrainSeconds   float64 // [15] longest wait for the last pushes after a phase
	Partitions     int     // [12]
	LargeThreshold int     // [0: the fanout's default, 1000]
	// DBMaxConns is the gateway's PostgreSQL pool size [0: as `inboxd gateway`
	// without --db-max-conns, gateway.DBMaxConns: max(16, cores)].
	DBMaxConns int
	// LargePushRate is the gateway's --ws-large-push-rate [0: its
	// default; negative: no pacing].
	LargePushRate float64
	// Profile takes a CPU profile of the gateway in each phase (files in
	// the output directory) and samples PostgreSQL's active statements.
	Profile bool
}

func (c *LargeConfig) setDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	deff := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Members, 100000)
	def(&c.Connected, 15000)
	c.Connected = max(c.Connected, 0)
	deff(&c.Rate, 100)
	deff(&c.Seconds, 60)
	def(&c.Small, 2000)
	def(&c.SmallMembers, 3)
	deff(&c.SmallRate, 100)
	def(&c.Senders, 20)
	def(&c.BuildConcurrency, 4)
	def(&c.Channels, 50)
	def(&c.SyncRequests, 400)
	deff(&c.DrainSeconds, 15)
	def(&c.Partitions, 12)
	if c.Workers == 0 {
		c.Workers = max(2, (c.Connected+7999)/8000)
	}
	switch {
	case c.Nice == 0:
		c.Nice = 10
	case c.Nice < 0:
		c.Nice = 0
	}
}

// LargePhase is one phase of the large figure.
type LargePhase struct {
	Name          string          `json:"name"`
	Send          largeSendResult `json:"send"`
	LargePush     Dist            `json:"large_push"` // send -> messages frame at each connected member of the large conversation
	SmallPush     Dist            `json:"small_push"` // send -> entries frame at the connected member of a small conversation
	LargeExpected int64           `json:"large_pushes_expected"`
	LargeReceived int64           `json:"large_pushes_received"`
	SmallExpected int64           `json:"small_pushes_expected"`
	SmallReceived int64           `json:"small_pushes_received"`
	InboxRows     int64           `json:"inbox_rows_written"`       // all conversations
	LargeRows     int64           `json:"large_inbox_rows_written"` // the large conversation's
	CPU           []CPUShare      `json:"cpu"`
	LoadMax       float64         `json:"load_average_1m_max"`
}

// LargeOffline is the catch-up of a member who was offline during the run.
type LargeOffline struct {
	User       int64   `json:"user"`
	Listed     bool    `json:"listed_in_sync_large"` // GET /v1/sync lists the conversation with its last seq
	ListedSeq  int64   `json:"listed_last_seq"`
	FromSeq    int64   `json:"from_seq"` // its position before the run
	Read       int64   `json:"read"`     // messages read with ?after=
	Pages      int     `json:"pages"`
	Bench      int64   `json:"bench_messages"` // of them, the run's
	Contiguous bool    `json:"contiguous"`
	Seconds    float64 `json:"seconds"`
}

// LargeResult is the outcome of Large.
type LargeResult struct {
	Config         LargeConfig `json:"config"`
	LoadAtStart    float64     `json:"load_average_1m_at_start"`
	LoadAtEnd      float64     `json:"load_average_1m_at_end"`
	BuildSeconds   float64     `json:"build_seconds"`
	BuildRequests  int         `json:"build_requests"`
	BuildRows      int64       `json:"build_inbox_rows"`
	MemberCount    int64       `json:"member_count"`
	ReadFanout     bool        `json:"read_fanout"`
	Connections    int         `json:"websockets"`
	LargeConnected int         `json:"large_members_connected"`
	ConnectSeconds float64     `json:"connect_seconds"`
	// PresenceSeconds is from the first connect until the gateway had
	// published every connected user online (the phases start after it).
	PresenceSeconds float64         `json:"presence_seconds"`
	ConnectRetries  int             `json:"connect_retries"` // hellos that failed while connecting (tried again)
	Phases          []LargePhase    `json:"phases"`          // the reference (small load only), then with the large traffic
	Delivery        largeRecvResult `json:"delivery"`
	FinalSeq        int64           `json:"large_last_seq"`
	BaseSeq         int64           `json:"large_seq_before_run"`
	Offline         LargeOffline    `json:"offline"`
	SyncWith        Dist            `json:"sync_with_channels"`
	SyncWithout     Dist            `json:"sync_without"`
	SyncListed      int             `json:"sync_large_list_length"`
}

// Rows implements Result.
func (r LargeResult) Rows() []Row {
	c := r.Config
	if len(r.Phases) < 2 {
		return r.partialRows()
	}
	ref, lg := r.Phases[0], r.Phases[1]
	d := r.Delivery
	writeRows := float64(c.Members) * float64(c.Members+1) / 2
	largeMsgs := float64(lg.Send.LargeOK)
	rows := []Row{{
		Figure: fmt.Sprintf("build a conversation of %s members by bulk add (%d requests of up to 1,000 ids, %d in flight), until projected",
			num(float64(c.Members)), r.BuildRequests, c.BuildConcurrency),
		Value:     fmt.Sprintf("%.1f s (%s members/s)", r.BuildSeconds, num(div(float64(r.MemberCount), r.BuildSeconds))),
		Reference: fmt.Sprintf("inbox rows it wrote: %s; all in write mode: %s", num(float64(r.BuildRows)), num(writeRows)),
		Ratio:     ratio(float64(r.BuildRows), writeRows),
	}, {
		Figure: fmt.Sprintf("send -> push (messages frame) to the %s connected members of the large conversation at %s msg/s offered (%s achieved, %d dropped at the in-flight cap, %d errors), p50 / p99 / max",
			num(float64(r.LargeConnected)), num(c.Rate), num(div(float64(lg.Send.LargeOK), lg.Send.Seconds)), lg.Send.Dropped, lg.Send.Errors),
		Value:     fmt.Sprintf("%s / %s / %s", ms(lg.LargePush.P50), ms(lg.LargePush.P99), ms(lg.LargePush.Max)),
		Reference: fmt.Sprintf("small conversations' send -> push, same time: %s / %s / %s", ms(lg.SmallPush.P50), ms(lg.SmallPush.P99), ms(lg.SmallPush.Max)),
		Ratio:     fmt.Sprintf("p50 %s, p99 %s", ratio(lg.LargePush.P50, lg.SmallPush.P50), ratio(lg.LargePush.P99, lg.SmallPush.P99)),
	}, {
		Figure: fmt.Sprintf("small conversations (%s of %d members, %s msg/s) send -> push with the large conversation's traffic, p50 / p99",
			num(float64(c.Small)), c.SmallMembers, num(c.SmallRate)),
		Value:     fmt.Sprintf("%s / %s", ms(lg.SmallPush.P50), ms(lg.SmallPush.P99)),
		Reference: fmt.Sprintf("the same load without it, same process (acceptance: p99 within 1.5x): %s / %s", ms(ref.SmallPush.P50), ms(ref.SmallPush.P99)),
		Ratio:     fmt.Sprintf("p50 %s, p99 %s", ratio(lg.SmallPush.P50, ref.SmallPush.P50), ratio(lg.SmallPush.P99, ref.SmallPush.P99)),
	}, {
		Figure:    fmt.Sprintf("inbox rows written per message of the large conversation (%s messages)", num(largeMsgs)),
		Value:     fmt.Sprintf("%.3f (%s rows)", div(float64(lg.LargeRows), largeMsgs), num(float64(lg.LargeRows))),
		Reference: fmt.Sprintf("write fan-out: one per member, %s", num(float64(r.MemberCount))),
		Ratio:     ratio(div(float64(lg.LargeRows), largeMsgs), float64(r.MemberCount)),
	}, {
		Figure: "connected members of the large conversation that got every message once, in seq order (frames checked seq by seq)",
		Value: fmt.Sprintf("%s of %s; %d duplicates, %d out of order, %d gaps (frames starting beyond the last seq + 1: read with ?after=), %s seqs never pushed; %d reconnects and %d too_long frames over all sessions, %d entries of the large conversation",
			num(float64(d.Large.Complete)), num(float64(d.Large.Sessions)), d.Large.Dups, d.Large.OOO, d.Large.Gaps, num(float64(d.Large.Missing)),
			d.Reconnects, d.TooLong, d.LargeEntries),
		Reference: fmt.Sprintf("pushes expected: %s messages x %s members = %s; received %s",
			num(largeMsgs), num(float64(r.LargeConnected)), num(float64(lg.LargeExpected)), num(float64(lg.LargeReceived))),
		Ratio: ratio(float64(lg.LargeReceived), float64(lg.LargeExpected)),
	}, {
		Figure: "connected members of the small conversations whose entries came once, in seq order",
		Value: fmt.Sprintf("%s of %s; %d duplicates, %d out of order, %d gaps",
			num(float64(d.Small.Complete)), num(float64(d.Small.Sessions)), d.Small.Dups, d.Small.OOO, d.Small.Gaps),
		Reference: fmt.Sprintf("pushes expected over both phases: %s; received %s",
			num(float64(ref.SmallExpected+lg.SmallExpected)), num(float64(ref.SmallReceived+lg.SmallReceived))),
		Ratio: ratio(float64(ref.SmallReceived+lg.SmallReceived), float64(ref.SmallExpected+lg.SmallExpected)),
	}}
	if r.LargeConnected == 0 { // --connected -1: no push to time or check
		rows = slices.Delete(rows, 4, 5)
		rows = slices.Delete(rows, 1, 2)
	}
	rows = append(rows, Row{
		Figure:    "HTTP send round trip (201 once projected) of the small conversations, p50 / p99, with the large conversation's traffic",
		Value:     fmt.Sprintf("%s / %s", ms(lg.Send.SmallSend.P50), ms(lg.Send.SmallSend.P99)),
		Reference: fmt.Sprintf("without it: %s / %s", ms(ref.Send.SmallSend.P50), ms(ref.Send.SmallSend.P99)),
		Ratio:     fmt.Sprintf("p50 %s, p99 %s", ratio(lg.Send.SmallSend.P50, ref.Send.SmallSend.P50), ratio(lg.Send.SmallSend.P99, ref.Send.SmallSend.P99)),
	}, Row{
		Figure:    "load average (1 min), highest during the phase with the large conversation's traffic (the machine's, other work included)",
		Value:     fmt.Sprintf("%.2f", lg.LoadMax),
		Reference: fmt.Sprintf("during the reference phase: %.2f; at the start of the run: %.2f", ref.LoadMax, r.LoadAtStart),
		Ratio:     ratio(lg.LoadMax, ref.LoadMax),
	})
	o := r.Offline
	verdict := "nothing missing"
	inConv := r.FinalSeq - r.BaseSeq
	if !o.Contiguous || o.Read != inConv || o.Bench < lg.Send.LargeOK || !o.Listed {
		verdict = "INCOMPLETE"
	}
	rows = append(rows, Row{
		Figure: "a member offline during the run catches up: GET /v1/sync (its large list), then GET …/messages?after=",
		Value: fmt.Sprintf("%s; read seqs %d..%d in %d pages (%.2f s), %s of the run's messages, %s",
			map[bool]string{true: fmt.Sprintf("listed at seq %d", o.ListedSeq), false: "NOT listed"}[o.Listed], o.FromSeq+1, o.FromSeq+o.Read, o.Pages, o.Seconds,
			num(float64(o.Bench)), verdict),
		Reference: fmt.Sprintf("messages in the conversation since the run began: %s (sends answered 201/202: %s; a send that timed out may still be stored)", num(float64(inConv)), num(largeMsgs)),
		Ratio:     ratio(float64(o.Read), float64(inConv)),
	}, Row{
		Figure: fmt.Sprintf("GET /v1/sync (nothing new) for a member of %d read-mode channels, p50 / p99 (%d requests)", c.Channels, r.SyncWith.N),
		Value:  fmt.Sprintf("%s / %s", ms(r.SyncWith.P50), ms(r.SyncWith.P99)),
		Reference: fmt.Sprintf("a member of %d write-mode conversations and no read-mode one: %s / %s",
			c.Channels, ms(r.SyncWithout.P50), ms(r.SyncWithout.P99)),
		Ratio: fmt.Sprintf("p50 %s, p99 %s", ratio(r.SyncWith.P50, r.SyncWithout.P50), ratio(r.SyncWith.P99, r.SyncWithout.P99)),
	})
	for _, s := range lg.CPU {
		var refCores float64
		for _, t := range ref.CPU {
			if t.Group == s.Group {
				refCores = t.Cores
			}
		}
		rows = append(rows, Row{
			Figure:    "CPU with the large conversation's traffic: " + s.Group,
			Value:     fmt.Sprintf("%.2f cores", s.Cores),
			Reference: fmt.Sprintf("without it (small load only): %.2f cores", refCores),
			Ratio:     ratio(s.Cores, refCores),
		})
	}
	return rows
}

// partialRows are the rows of a run that ended before its second phase.
func (r LargeResult) partialRows() []Row {
	var rows []Row
	if r.BuildSeconds > 0 {
		rows = append(rows, Row{
			Figure:    fmt.Sprintf("build a conversation of %s members by bulk add, until projected (the run ended early)", num(float64(r.Config.Members))),
			Value:     fmt.Sprintf("%.1f s", r.BuildSeconds),
			Reference: fmt.Sprintf("inbox rows it wrote: %s", num(float64(r.BuildRows))),
			Ratio:     "n/a",
		})
	}
	for _, p := range r.Phases {
		rows = append(rows, Row{
			Figure:    fmt.Sprintf("%s: small conversations' send -> push p50 / p99 (the run ended early)", p.Name),
			Value:     fmt.Sprintf("%s / %s", ms(p.SmallPush.P50), ms(p.SmallPush.P99)),
			Reference: fmt.Sprintf("pushes %d of %d; load average up to %.2f", p.SmallReceived, p.SmallExpected, p.LoadMax),
			Ratio:     "n/a",
		})
	}
	return rows
}

// largeAPI is the orchestrator's HTTP client of the gateway under test
// (the build, the channels, the catch-up and the timed syncs; the load of
// the run comes from the workers).
type largeAPI struct {
	addr   string
	secret []byte
	client *http.Client
	mu     sync.Mutex
	tokens map[int64]string
}

func (a *largeAPI) token(u int64) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t, ok := a.tokens[u]; ok {
		return t, nil
	}
	t, err := gateway.IssueToken(a.secret, u, 2*time.Hour)
	if err == nil {
		a.tokens[u] = t
	}
	return t, err
}

// do sends one request as user; 429 and 503 are retried after their
// Retry-After (at most 20 times). out, when not nil, receives the JSON of
// a 2xx answer.
func (a *largeAPI) do(ctx context.Context, method, path string, user int64, body, out any) (int, error) {
	tok, err := a.token(user)
	if err != nil {
		return 0, err
	}
	var raw []byte
	if body != nil {
		if raw, err = json.Marshal(body); err != nil {
			return 0, err
		}
	}
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+a.addr+path, bytes.NewReader(raw))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := a.client.Do(req)
		if err != nil {
			return 0, err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return resp.StatusCode, err
		}
		if (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && try < 20 {
			wait := time.Second
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
				wait = time.Duration(s) * time.Second
			}
			if !sleepCtx(ctx, wait) {
				return resp.StatusCode, ctx.Err()
			}
			continue
		}
		if resp.StatusCode/100 != 2 {
			return resp.StatusCode, fmt.Errorf("%s %s: HTTP %d: %.300s", method, path, resp.StatusCode, data)
		}
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				return resp.StatusCode, fmt.Errorf("%s %s: %w", method, path, err)
			}
		}
		return resp.StatusCode, nil
	}
}

// User ids of the figure: the large conversation's members are 1..N (1
// creates it; 2..C+1 are connected; the last Senders send; C+2 is the
// offline member), the small conversations' from largeSmallBase, the
// users of the timed syncs from largeSyncBase.
const (
	largeSmallBase = 100_000_000
	largeSyncBase  = 200_000_000
	largeSmallConv = 1_000_000_000 // ids of the small conversations (the gateway's sequence allocates from 1)
)

// Large measures issue 21's figures (docs/large-conversations.md): the
// build of an N-member conversation by bulk add; send -> push latency to
// C connected members of it at R msg/s while S small conversations carry
// a normal load, and the small conversations' latency against the same
// load alone; the inbox rows per message of the large conversation; that
// each connected member got every message once and in order, and that an
// offline member catches up; and the cost of GET /v1/sync for a member of
// 50 read-mode channels against a member of none.
func Large(ctx context.Context, env *Env, cfg LargeConfig) (LargeResult, error) {
	cfg.setDefaults()
	res := LargeResult{Config: cfg, LoadAtStart: loadAverage()}
	pr := env.Progress
	if cfg.Connected+cfg.Senders+2 > cfg.Members {
		return res, fmt.Errorf("bench large: %d members cannot hold %d connected, %d senders and an offline one", cfg.Members, cfg.Connected, cfg.Senders)
	}
	if cfg.SmallMembers < 2 {
		return res, errors.New("bench large: small conversations need 2 members at least")
	}
	progressf(pr, "bench large: N=%d members, C=%d connected, R=%g msg/s, D=%gs, S=%d small conversations at %g msg/s; load average %.2f",
		cfg.Members, cfg.Connected, cfg.Rate, cfg.Seconds, cfg.Small, cfg.SmallRate, res.LoadAtStart)
	pl, err := env.newPipeline(ctx, "large", cfg.Partitions)
	if err != nil {
		return res, err
	}
	defer pl.Close()
	reg := prometheus.NewRegistry()
	fo, err := fanout.New(fanout.Config{Brokers: pl.brokers, Logger: env.Log, Registerer: reg, LargeThreshold: cfg.LargeThreshold}, pl.pool)
	if err != nil {
		return res, err
	}
	fctx, stopFanout := context.WithCancel(ctx)
	fdone := make(chan error, 1)
	go func() { fdone <- fo.Run(fctx) }()
	defer func() { stopFanout(); <-fdone }()

	// The small conversations, appended directly (a few members each).
	small := make([]e2eConv, cfg.Small)
	var smallRecv []int64
	for i := range small {
		c := e2eConv{ID: int64(largeSmallConv + i)}
		var all []int64
		for k := 0; k < cfg.SmallMembers; k++ {
			all = append(all, int64(largeSmallBase+i*cfg.SmallMembers+k))
		}
		c.Members = all[:2] // the sender, then the connected member
		smallRecv = append(smallRecv, all[1])
		small[i] = c
		e := events.New(events.ConversationCreated, c.ID, all[0])
		e.Title = "small"
		e.Members = all[1:]
		if _, err := pl.prod.Append(ctx, e); err != nil {
			return res, fmt.Errorf("create small conversation %d: %w", c.ID, err)
		}
	}
	if err := testenv.WaitCaughtUp(ctx, pl.pool, pl.prod, 5*time.Minute); err != nil {
		return res, err
	}

	secret := randomSecret()
	conns := cfg.Connected + cfg.Small
	gw, ready, err := startServe(ctx, env, "gateway", serveConfig{Mode: "gateway", DatabaseURL: pl.url, Brokers: pl.brokers,
		Partitions: cfg.Partitions, Secret: secret, MaxConns: conns + 500, DBMaxConns: cfg.DBMaxConns,
		LargePushRate: cfg.LargePushRate, Deadline: 2 * time.Hour})
	if err != nil {
		return res, err
	}
	defer gw.kill()
	api := &largeAPI{addr: ready.Addr, secret: []byte(secret), tokens: map[int64]string{},
		client: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: sourceDialer(nil, 10*time.Second)}}}

	// The build: create, then bulk add 2..N, 1000 per request.
	t0 := time.Now()
	var created protocol.ConversationCreated
	if _, err := api.do(ctx, "POST", "/v1/conversations", 1, map[string]any{"title": "large"}, &created); err != nil {
		return res, err
	}
	cid := created.ConversationID
	var rows0 int64
	if err := pl.pool.QueryRow(ctx, `SELECT count(*) FROM inbox`).Scan(&rows0); err != nil {
		return res, err
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
	var next atomic.Int64
	eg, ectx := errgroup.WithContext(ctx)
	for w := 0; w < cfg.BuildConcurrency; w++ {
		eg.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(batches) {
					return nil
				}
				if _, err := api.do(ectx, "POST", fmt.Sprintf("/v1/conversations/%d/members", cid), 1,
					map[string]any{"user_ids": batches[i]}, nil); err != nil {
					return err
				}
			}
		})
	}
	if err := eg.Wait(); err != nil {
		return res, fmt.Errorf("bulk add: %w", err)
	}
	if err := testenv.WaitCaughtUp(ctx, pl.pool, pl.prod, 10*time.Minute); err != nil {
		return res, err
	}
	res.BuildSeconds = time.Since(t0).Seconds()
	var rows1 int64
	if err := pl.pool.QueryRow(ctx, `SELECT member_count, read_fanout, (SELECT count(*) FROM inbox) FROM conversations WHERE id = $1`, cid).
		Scan(&res.MemberCount, &res.ReadFanout, &rows1); err != nil {
		return res, err
	}
	res.BuildRows = rows1 - rows0
	progressf(pr, "bench large: conversation %d of %d members (read mode %v) built in %.1fs, %d inbox rows",
		cid, res.MemberCount, res.ReadFanout, res.BuildSeconds, res.BuildRows)
	if res.MemberCount != int64(cfg.Members) {
		return res, fmt.Errorf("bench large: %d members after the build, want %d", res.MemberCount, cfg.Members)
	}

	// The users of the timed syncs: one member of Channels channels, one
	// of as many write-mode conversations.
	owner, withCh, without := int64(largeSyncBase), int64(largeSyncBase+1), int64(largeSyncBase+2)
	for i := 0; i < cfg.Channels; i++ {
		if _, err := api.do(ctx, "POST", "/v1/conversations", owner, map[string]any{"title": fmt.Sprintf("channel %d", i), "channel": true, "members": []int64{withCh}}, nil); err != nil {
			return res, err
		}
		if _, err := api.do(ctx, "POST", "/v1/conversations", owner, map[string]any{"title": fmt.Sprintf("group %d", i), "members": []int64{without}}, nil); err != nil {
			return res, err
		}
	}
	if err := testenv.WaitCaughtUp(ctx, pl.pool, pl.prod, 5*time.Minute); err != nil {
		return res, err
	}
	if err := pl.pool.QueryRow(ctx, `SELECT last_seq FROM conversations WHERE id = $1`, cid).Scan(&res.BaseSeq); err != nil {
		return res, err
	}

	// The receivers: the connected large members spread evenly over the
	// workers (at a lower priority, cfg.Nice), and the small
	// conversations' connected members in one more process of their own
	// at the normal priority.
	recvUsers := make([][]int64, cfg.Workers+1)
	for i := 0; i < cfg.Connected; i++ {
		recvUsers[i%cfg.Workers] = append(recvUsers[i%cfg.Workers], int64(2+i))
	}
	recvUsers[cfg.Workers] = append(recvUsers[cfg.Workers], smallRecv...)
	// Each receiver says hello with its head, as a client that was
	// connected before.
	heads := map[int64]int64{}
	{
		var all []int64
		for _, us := range recvUsers {
			all = append(all, us...)
		}
		rs, err := pl.pool.Query(ctx, `SELECT id, inbox_seq FROM users WHERE id = ANY($1)`, all)
		if err != nil {
			return res, err
		}
		for rs.Next() {
			var u, h int64
			if err := rs.Scan(&u, &h); err != nil {
				rs.Close()
				return res, err
			}
			heads[u] = h
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return res, err
		}
	}
	var recvs children
	defer func() { recvs.killAll() }()
	tc := time.Now()
	for w := range recvUsers {
		name, nice := fmt.Sprintf("large-recv-%d", w+1), cfg.Nice
		if w == cfg.Workers {
			name, nice = "small-recv", 0
		}
		c, err := env.Runner.start(pr, name, []string{"worker", "large"}, largeWorkerConfig{
			Role: "recv", Addr: ready.Addr, Secret: secret, Users: recvUsers[w], Heads: headsOf(recvUsers[w], heads), LargeConv: cid,
			SrcIPs: sourceIPs(10+2*w, 2), Nice: nice, Deadline: time.Hour})
		if err != nil {
			return res, err
		}
		recvs = append(recvs, c)
	}
	var senders []int64
	for i := 0; i < cfg.Senders; i++ {
		senders = append(senders, int64(cfg.Members-i))
	}
	sender, err := env.Runner.start(pr, "large-send", []string{"worker", "large"}, largeWorkerConfig{
		Role: "send", Addr: ready.Addr, Secret: secret, LargeConv: cid, LargeSenders: senders, Small: small,
		SrcIPs: sourceIPs(8, 2), Deadline: time.Hour})
	if err != nil {
		return res, err
	}
	defer sender.kill()
	if _, err := sender.expect(ctx, "ready", time.Minute); err != nil {
		return res, err
	}
	for _, c := range recvs {
		var rd struct {
			Connections int `json:"connections"`
			Retries     int `json:"retries"`
		}
		if err := c.expectJSON(ctx, "ready", 10*time.Minute, &rd); err != nil {
			return res, err
		}
		res.Connections += rd.Connections
		res.ConnectRetries += rd.Retries
	}
	res.ConnectSeconds = time.Since(tc).Seconds()
	res.LargeConnected = cfg.Connected
	progressf(pr, "bench large: %d WebSockets connected in %.1fs (%d of the large conversation's members) from %d processes, %d hellos tried again",
		res.Connections, res.ConnectSeconds, cfg.Connected, len(recvs), res.ConnectRetries)
	tp := time.Now()
	online, err := waitPresence(ctx, ready.Addr, res.Connections, 5*time.Minute)
	if err != nil {
		return res, err
	}
	res.PresenceSeconds = time.Since(tc).Seconds()
	progressf(pr, "bench large: presence: %d users published online %.1fs after the first connect (waited %.1fs more); the phases start now",
		online, res.PresenceSeconds, time.Since(tp).Seconds())

	groups := map[string]func() []int{
		"gateway (child process)":       func() []int { return []int{ready.Pid} },
		"fanout + kfake (orchestrator)": func() []int { return []int{os.Getpid()} },
		"load generators (child processes)": func() []int {
			p := []int{sender.pid()}
			for _, c := range recvs {
				p = append(p, c.pid())
			}
			return p
		},
		"PostgreSQL (all its processes)": env.postgresPids,
	}
	if env.PGData == "" {
		delete(groups, "PostgreSQL (all its processes)")
	}
	counts := func() (largeCounts, error) {
		tot := largeCounts{Large: map[int]int64{}, Small: map[int]int64{}}
		for _, c := range recvs {
			if err := c.send("count"); err != nil {
				return tot, err
			}
			var lc largeCounts
			// A receiver far behind answers late: its commands wait
			// behind its frames on a starved machine.
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
	countRows := func() (all, large int64, err error) {
		err = pl.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE conversation_id = $1) FROM inbox`, cid).Scan(&all, &large)
		return
	}
	phase := func(idx int, name string, largeRate float64) (LargePhase, error) {
		p := LargePhase{Name: name}
		all0, large0, err := countRows()
		if err != nil {
			return p, err
		}
		progressf(pr, "bench large: %s: %g msg/s into the large conversation, %g msg/s into the small ones, for %gs ...", name, largeRate, cfg.SmallRate, cfg.Seconds)
		meter := newCPUMeter(groups)
		load := loadAverage()
		stopProfiles := func() {}
		if cfg.Profile {
			stopProfiles = largeProfiles(ctx, env, pl.pool, ready.Ctl, idx, cfg.Seconds)
		}
		defer stopProfiles()
		cmd, _ := json.Marshal(largePhaseCmd{Idx: idx, LargeRate: largeRate, SmallRate: cfg.SmallRate, Seconds: cfg.Seconds})
		if err := sender.send("phase " + string(cmd)); err != nil {
			return p, err
		}
		if err := sender.expectJSON(ctx, "result", time.Duration(cfg.Seconds+300)*time.Second, &p.Send); err != nil {
			return p, err
		}
		p.CPU = meter.stop()
		p.LargeExpected = p.Send.LargeOK * int64(cfg.Connected)
		p.SmallExpected = p.Send.SmallPushN
		drainEnd := time.Now().Add(time.Duration(cfg.DrainSeconds * float64(time.Second)))
		for {
			c, err := counts()
			if err != nil {
				return p, err
			}
			p.LargeReceived, p.SmallReceived = c.Large[idx], c.Small[idx]
			load = max(load, loadAverage())
			if (p.LargeReceived >= p.LargeExpected && p.SmallReceived >= p.SmallExpected) || time.Now().After(drainEnd) {
				break
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
		p.LoadMax = max(load, loadAverage())
		if err := testenv.WaitCaughtUp(ctx, pl.pool, pl.prod, 5*time.Minute); err != nil {
			return p, err
		}
		all1, large1, err := countRows()
		if err != nil {
			return p, err
		}
		p.InboxRows, p.LargeRows = all1-all0, large1-large0
		progressf(pr, "bench large: %s: sent %d large + %d small (%d dropped, %d errors: %s), pushes %d/%d large, %d/%d small; %d inbox rows (%d of the large conversation); load average %.2f",
			name, p.Send.LargeOK, p.Send.SmallOK, p.Send.Dropped, p.Send.Errors, p.Send.FirstErr, p.LargeReceived, p.LargeExpected, p.SmallReceived, p.SmallExpected,
			p.InboxRows, p.LargeRows, p.LoadMax)
		return p, nil
	}
	// The build wrote about 7 inbox rows per member and the members
	// themselves: without a settle, autovacuum and the checkpointer do that
	// work during the first phase, the reference (its p99 measured 58-62 ms
	// in two runs of three, 11.4 ms in the third).
	took, err := pl.settle(ctx)
	if err != nil {
		return res, err
	}
	progressf(pr, "bench large: settled (VACUUM ANALYZE, CHECKPOINT) in %.1fs", took.Seconds())
	p, err := phase(0, "reference (small conversations only)", 0)
	if err != nil {
		return res, err
	}
	res.Phases = append(res.Phases, p)
	if p, err = phase(1, "with the large conversation", cfg.Rate); err != nil {
		return res, err
	}
	res.Phases = append(res.Phases, p)
	if err := pl.pool.QueryRow(ctx, `SELECT last_seq FROM conversations WHERE id = $1`, cid).Scan(&res.FinalSeq); err != nil {
		return res, err
	}
	largeHist, smallHist := map[int]*logHist{}, map[int]*logHist{}
	for _, c := range recvs {
		if err := c.send(fmt.Sprintf("report %d", res.FinalSeq)); err != nil {
			return res, err
		}
		var r largeRecvResult
		if err := c.expectJSON(ctx, "result", 5*time.Minute, &r); err != nil {
			return res, err
		}
		for p, h := range r.LargeHist {
			if largeHist[p] == nil {
				largeHist[p] = newLogHist()
			}
			largeHist[p].merge(h)
		}
		for p, h := range r.SmallHist {
			if smallHist[p] == nil {
				smallHist[p] = newLogHist()
			}
			smallHist[p].merge(h)
		}
		d := &res.Delivery
		d.Sessions += r.Sessions
		d.Reconnects += r.Reconnects
		d.LargeEntries += r.LargeEntries
		d.TooLong += r.TooLong
		mergeSeq(&d.Large, r.Large)
		mergeSeq(&d.Small, r.Small)
	}
	for i := range res.Phases {
		if h := largeHist[i]; h != nil {
			res.Phases[i].LargePush = h.dist()
		}
		if h := smallHist[i]; h != nil {
			res.Phases[i].SmallPush = h.dist()
		}
	}
	for _, c := range recvs {
		_ = c.send("quit")
	}
	_ = sender.send("quit")

	// The offline member catches up.
	if err := largeCatchUp(ctx, api, cid, int64(cfg.Connected+2), res.BaseSeq, &res.Offline); err != nil {
		return res, fmt.Errorf("catch-up: %w", err)
	}
	// GET /v1/sync with and without read-mode conversations, in turn.
	var err2 error
	if res.SyncWith, res.SyncWithout, res.SyncListed, err2 = largeTimeSync(ctx, api, withCh, without, cfg.SyncRequests); err2 != nil {
		return res, err2
	}
	progressf(pr, "bench large: sync with %d channels (listed %d) p50 %s p99 %s; without p50 %s p99 %s",
		cfg.Channels, res.SyncListed, ms(res.SyncWith.P50), ms(res.SyncWith.P99), ms(res.SyncWithout.P50), ms(res.SyncWithout.P99))
	for _, c := range recvs {
		_ = c.stop(30 * time.Second)
	}
	_ = sender.stop(10 * time.Second)
	_ = gw.stop(20 * time.Second)
	res.LoadAtEnd = loadAverage()
	return res, nil
}

func headsOf(users []int64, heads map[int64]int64) []int64 {
	out := make([]int64, len(users))
	for i, u := range users {
		out[i] = heads[u]
	}
	return out
}

func mergeSeq(s *seqSummary, o seqSummary) {
	s.Sessions += o.Sessions
	s.Received += o.Received
	s.Dups += o.Dups
	s.OOO += o.OOO
	s.Gaps += o.Gaps
	s.Missing += o.Missing
	s.Complete += o.Complete
}

// largeCatchUp is what a client that was offline does: GET /v1/sync
// lists the conversation in large with its last seq; it reads from its
// own position with ?after= until has_more is false.
func largeCatchUp(ctx context.Context, api *largeAPI, cid, user, from int64, o *LargeOffline) error {
	o.User, o.FromSeq, o.Contiguous = user, from, true
	t0 := time.Now()
	var sa protocol.SyncAnswer
	if _, err := api.do(ctx, "GET", "/v1/sync?after=0", user, nil, &sa); err != nil {
		return err
	}
	for _, l := range sa.Large {
		if l.ConversationID == cid {
			o.Listed, o.ListedSeq = true, l.LastSeq
		}
	}
	pos := from
	for {
		var page struct {
			Messages []protocol.Message `json:"messages"`
			HasMore  bool               `json:"has_more"`
		}
		if _, err := api.do(ctx, "GET", fmt.Sprintf("/v1/conversations/%d/messages?after=%d&limit=200", cid, pos), user, nil, &page); err != nil {
			return err
		}
		o.Pages++
		for _, m := range page.Messages {
			if m.Seq != pos+1 {
				o.Contiguous = false
			}
			pos = m.Seq
			o.Read++
			var body string
			if json.Unmarshal(m.Body, &body) == nil && len(body) > 3 && body[:3] == "lb:" {
				o.Bench++
			}
		}
		if !page.HasMore || len(page.Messages) == 0 {
			break
		}
	}
	if o.Listed && pos != o.ListedSeq {
		o.Contiguous = false
	}
	o.Seconds = time.Since(t0).Seconds()
	return nil
}

// largeTimeSync times n GET /v1/sync?after=<head> (nothing new, no
// If-None-Match: the answer is computed) for each of two users, in turn
// (so that both see the same machine), each paced under the gateway's
// per-user read rate; it returns their distributions and the length of
// the first one's large list.
func largeTimeSync(ctx context.Context, api *largeAPI, userA, userB int64, n int) (Dist, Dist, int, error) {
	users := []int64{userA, userB}
	paths := make([]string, 2)
	for i, u := range users {
		var first protocol.SyncAnswer
		if _, err := api.do(ctx, "GET", "/v1/sync?after=0&limit=200", u, nil, &first); err != nil {
			return Dist{}, Dist{}, 0, err
		}
		paths[i] = fmt.Sprintf("/v1/sync?after=%d", first.Head)
	}
	lat := make([][]float64, 2)
	tick := time.NewTicker(25 * time.Millisecond) // 40/s per user: under the default 50/s
	defer tick.Stop()
	listed := 0
	for k := 0; k < n; k++ {
		select {
		case <-ctx.Done():
			return Dist{}, Dist{}, 0, ctx.Err()
		case <-tick.C:
		}
		for j := range users {
			i := (k + j) % 2 // alternate which goes first
			var sa protocol.SyncAnswer
			t := time.Now()
			code, err := api.do(ctx, "GET", paths[i], users[i], nil, &sa)
			if err != nil {
				return Dist{}, Dist{}, 0, err
			}
			if code != http.StatusOK {
				return Dist{}, Dist{}, 0, fmt.Errorf("sync: HTTP %d", code)
			}
			lat[i] = append(lat[i], float64(time.Since(t).Microseconds())/1000)
			if i == 0 {
				listed = len(sa.Large)
			}
		}
	}
	return newDist(lat[0]), newDist(lat[1]), listed, nil
}
