package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/protocol"
)

// LargeConfig configures Large (read fan-out, docs/large-conversations.md).
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
	setDefault(&c.Members, 100000)
	setDefault(&c.Connected, 15000)
	c.Connected = max(c.Connected, 0)
	setDefault(&c.Rate, 100)
	setDefault(&c.Seconds, 60)
	setDefault(&c.Small, 2000)
	setDefault(&c.SmallMembers, 3)
	setDefault(&c.SmallRate, 100)
	setDefault(&c.Senders, 20)
	setDefault(&c.BuildConcurrency, 4)
	setDefault(&c.Channels, 50)
	setDefault(&c.SyncRequests, 400)
	setDefault(&c.DrainSeconds, 15)
	setDefault(&c.Partitions, 12)
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
