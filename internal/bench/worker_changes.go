package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/inboxd/inboxd/gateway"
)

// changesWorkerConfig configures the load generator of the edit half of
// the changes figure: it holds a WebSocket for every member of Convs, sends
// the first message of each conversation (by its first member, the only
// one who may edit it), then runs phases of sends or of edits of those
// messages over HTTP, and times, on every other member's WebSocket, the
// push that shows each of them.
type changesWorkerConfig struct {
	Addr        string
	Secret      string
	Convs       []e2eConv
	SrcIPs      []string
	MaxInflight int // requests in flight; past it one is dropped [4000]
	Deadline    time.Duration
}

// changesPhaseCmd runs one phase: Mode "send" (POST a message) or "edit"
// (PATCH the conversation's first message) at Rate requests/s for
// Seconds, round robin over the conversations, then up to DrainSeconds
// for the last pushes.
type changesPhaseCmd struct {
	Name         string  `json:"name"`
	Mode         string  `json:"mode"`
	Rate         float64 `json:"rate"`
	Seconds      float64 `json:"seconds"`
	DrainSeconds float64 `json:"drain_seconds"`
}

// ChangesPhase is the outcome of one phase of sends or edits.
type ChangesPhase struct {
	Name       string  `json:"name"`
	Mode       string  `json:"mode"`
	Offered    float64 `json:"offered_per_sec"`
	Seconds    float64 `json:"seconds"`
	Sent       int64   `json:"sent"`
	Applied    int64   `json:"answered_200_201"`
	Pending    int64   `json:"answered_202"`
	Errors     int64   `json:"errors"`
	Dropped    int64   `json:"dropped"` // not sent: MaxInflight reached
	Achieved   float64 `json:"achieved_per_sec"`
	Expected   int64   `json:"pushes_expected"`
	Received   int64   `json:"pushes_received"`
	Reconnects int64   `json:"reconnects"`
	// Push is request -> push at each other member's WebSocket; for an
	// edit, the first update entry carrying that edit's body or a later
	// edit's (an entry carries the message as it is when read).
	Push     Dist   `json:"push"`
	Request  Dist   `json:"request"` // the HTTP round trip (answered after the projection)
	FirstErr string `json:"first_error,omitempty"`
	// The orchestrator fills these in: the fanout's share of the phase
	// spent applying batches (summed over its concurrent apply workers)
	// and their mean size, and the CPU of each process group.
	FanoutBusy     float64    `json:"fanout_busy"`
	FanoutBatchMs  float64    `json:"fanout_batch_mean_ms"`
	FanoutPerBatch float64    `json:"fanout_records_per_batch"`
	CPU            []CPUShare `json:"cpu"`
}

// convEdits are the edits of one conversation's first message in a phase:
// their request times in the order they were made, and for each member
// how many of them it has seen.
type convEdits struct {
	// one lets one edit of the message be in flight at a time, so that
	// the edits are appended, hence applied, in the order of their
	// request times: two concurrent edits could be applied in the other
	// order, and an entry showing the earlier one (applied last) would
	// not deliver the later one, superseded in the same batch.
	one  sync.Mutex
	mu   sync.Mutex
	ts   []int64
	seen map[int64]int
}

type changesPhaseRec struct {
	pushTimes
	mode  string
	edits map[int64]*convEdits // by conversation; the map is read-only
}

type changesWorker struct {
	cfg       changesWorkerConfig
	tokens    map[int64]string
	conv      map[int64]int64 // user -> its conversation
	first     map[int64]int64 // conversation -> seq of its first message
	sendConns chan *rawConn
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	dialer    *websocket.Dialer
	phases    phaseRecs[changesPhaseRec]
	reconns   atomic.Int64
}

func runChangesWorker(ctx context.Context, cio *childIO, raw []byte) error {
	var cfg changesWorkerConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	ctx, cancel := withDeadline(ctx, cfg.Deadline)
	defer cancel()
	if cfg.MaxInflight == 0 {
		cfg.MaxInflight = 4000
	}
	dial := sourceDialer(cfg.SrcIPs, 10*time.Second)
	w := &changesWorker{
		cfg: cfg, tokens: map[int64]string{}, conv: map[int64]int64{}, first: map[int64]int64{},
		sendConns: make(chan *rawConn, 4096), dial: dial,
		dialer: &websocket.Dialer{NetDialContext: dial, HandshakeTimeout: 10 * time.Second,
			ReadBufferSize: 4096, WriteBufferSize: 1024},
	}
	for _, c := range cfg.Convs {
		for _, u := range c.Members {
			if _, ok := w.conv[u]; ok {
				return fmt.Errorf("changes worker: user %d is in two conversations", u)
			}
			tok, err := gateway.IssueToken([]byte(cfg.Secret), u, 2*time.Hour)
			if err != nil {
				return err
			}
			w.tokens[u], w.conv[u] = tok, c.ID
		}
	}
	var fs []*wsFollower
	for u, tok := range w.tokens {
		fs = append(fs, w.follower(u, tok))
	}
	stop, err := followAll(ctx, fs, 64)
	if err != nil {
		return err
	}
	defer stop()
	if err := w.sendFirst(ctx); err != nil {
		return err
	}
	cio.emit("ready", map[string]int{"connections": len(w.tokens)})
	for idx := 0; ; idx++ {
		cmd, ok, err := nextPhase[changesPhaseCmd](ctx, cio, "changes")
		if !ok {
			return err
		}
		res, err := w.runPhase(ctx, idx, cmd)
		if err != nil {
			return err
		}
		cio.emit("result", res)
	}
}

// sendFirst sends the message each conversation's edits will change, from
// its first member, and keeps its seq; 64 at a time.
func (w *changesWorker) sendFirst(ctx context.Context) error {
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, 64)
	for _, c := range w.cfg.Convs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			seq, err := w.sendForSeq(ctx, c.ID, w.tokens[c.Members[0]], "first")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmpErr(firstErr, fmt.Errorf("first message of conversation %d: %w", c.ID, err))
				return
			}
			w.first[c.ID] = seq
		}()
	}
	wg.Wait()
	return firstErr
}

func cmpErr(old, err error) error {
	if old != nil {
		return old
	}
	return err
}

// sendForSeq sends a message and returns its seq; a 202 (not yet
// projected) is retried with the same msg_id until it answers 200.
func (w *changesWorker) sendForSeq(ctx context.Context, conv int64, tok, body string) (int64, error) {
	raw, _ := json.Marshal(map[string]string{"msg_id": uuid.NewString(), "body": body})
	c := newRawConn(w.dial, w.cfg.Addr, 30*time.Second)
	defer c.close()
	path := []byte(fmt.Sprintf("/v1/conversations/%d/messages", conv))
	for try := 0; try < 20; try++ {
		resp, err := c.do(ctx, "POST", path, tok, "", raw, true)
		if err != nil {
			return 0, err
		}
		switch resp.Status {
		case http.StatusCreated, http.StatusOK:
			var m struct {
				Seq int64 `json:"seq"`
			}
			if err := json.Unmarshal(resp.Body, &m); err != nil || m.Seq <= 0 {
				return 0, fmt.Errorf("answer %q: no seq", resp.Body)
			}
			return m.Seq, nil
		case http.StatusAccepted:
			sleepCtx(ctx, 200*time.Millisecond)
		default:
			return 0, fmt.Errorf("HTTP %d: %s", resp.Status, resp.Body)
		}
	}
	return 0, fmt.Errorf("still pending after 20 tries")
}

// follower is the one WebSocket of user: it times the pushes of the
// bench's sends and edits.
func (w *changesWorker) follower(user int64, tok string) *wsFollower {
	return &wsFollower{dialer: w.dialer, addr: w.cfg.Addr, tok: tok, reconns: &w.reconns, frame: readFrames(nil,
		func(e *wsEntry, now int64) {
			if e.Message != nil && e.Message.SenderID != user && e.Message.Body.IsText {
				w.record(user, e.ConversationID, e.Kind, e.Message.Body.Text, now)
			}
		})}
}

// record times an entry of a body written by benchBody: a message entry
// in a send phase, an update entry in an edit phase.
func (w *changesWorker) record(user, conv int64, kind, body string, now int64) {
	p, t0, ok := parseBenchBody(body)
	if !ok {
		return
	}
	rec := w.phases.get(p)
	if rec == nil {
		return
	}
	switch {
	case rec.mode == "send" && kind == "message":
		rec.add(float32(float64(now-t0) / 1e6))
	case rec.mode == "edit" && kind == "update":
		// The entry shows the edit of t0 and every earlier one of the
		// message: each is delivered to this member now, if not before.
		ce := rec.edits[conv]
		if ce == nil {
			return
		}
		var lat []float32
		ce.mu.Lock()
		i := ce.seen[user]
		for ; i < len(ce.ts) && ce.ts[i] <= t0; i++ {
			lat = append(lat, float32(float64(now-ce.ts[i])/1e6))
		}
		ce.seen[user] = i
		ce.mu.Unlock()
		if len(lat) > 0 {
			rec.add(lat...)
		}
	}
}

func (w *changesWorker) runPhase(ctx context.Context, idx int, cmd changesPhaseCmd) (ChangesPhase, error) {
	if cmd.Mode != "send" && cmd.Mode != "edit" {
		return ChangesPhase{}, fmt.Errorf("changes worker: unknown mode %q", cmd.Mode)
	}
	rec := &changesPhaseRec{mode: cmd.Mode, edits: map[int64]*convEdits{}}
	for _, c := range w.cfg.Convs {
		rec.edits[c.ID] = &convEdits{seen: map[int64]int{}}
	}
	w.phases.start(idx, rec)
	res := ChangesPhase{Name: cmd.Name, Mode: cmd.Mode, Offered: cmd.Rate}
	reconns0 := w.reconns.Load()

	limit := newInflightCap(w.cfg.MaxInflight)
	o := offerLoad(ctx, cmd.Rate, cmd.Seconds, limit, func(i int) answer {
		conv := w.cfg.Convs[i%len(w.cfg.Convs)]
		a := answer{Pushes: int64(len(conv.Members) - 1)}
		var t0 time.Time
		if cmd.Mode == "send" {
			from := conv.Members[(i/len(w.cfg.Convs))%len(conv.Members)]
			t0 = time.Now()
			a.Code, a.Err = w.request(ctx, "POST", fmt.Sprintf("/v1/conversations/%d/messages", conv.ID), w.tokens[from],
				map[string]string{"msg_id": uuid.NewString(), "body": benchBody(idx, t0)})
		} else {
			// The sender of the first message, the one who may edit it.
			// The request time joins the message's list before the
			// request, in the order of the requests, so that a push of a
			// later edit also delivers this one.
			from := conv.Members[0]
			ce := rec.edits[conv.ID]
			ce.one.Lock()
			defer ce.one.Unlock()
			ce.mu.Lock()
			t0 = time.Now()
			ce.ts = append(ce.ts, t0.UnixNano())
			ce.mu.Unlock()
			a.Code, a.Err = w.request(ctx, "PATCH", fmt.Sprintf("/v1/conversations/%d/messages/%d", conv.ID, w.first[conv.ID]), w.tokens[from],
				map[string]string{"change_id": uuid.NewString(), "body": benchBody(idx, t0)})
		}
		a.Ms = msSince(t0)
		return a
	})
	rec.drain(ctx, o.Pushes, cmd.DrainSeconds)
	w.phases.end(idx)

	res.Seconds, res.Sent, res.Applied, res.Pending, res.Errors, res.Dropped = o.Seconds, o.Sent, o.Applied, o.Pending, o.Errors, o.Dropped
	res.Achieved = float64(res.Applied+res.Pending) / res.Seconds
	res.Expected, res.Received = o.Pushes, rec.received.Load()
	res.Reconnects = w.reconns.Load() - reconns0
	res.FirstErr = o.FirstErr
	res.Request = newDist(f32to64(o.RoundTrips))
	res.Push = rec.dist()
	return res, ctx.Err()
}

// request sends one JSON request over an idle keep-alive connection of the
// pool (a new one when none is idle). Both kinds are idempotent (msg_id,
// change_id), so rawConn's one retry on a connection the server closed is
// safe.
func (w *changesWorker) request(ctx context.Context, method, path, tok string, body any) (int, error) {
	raw, _ := json.Marshal(body)
	var c *rawConn
	select {
	case c = <-w.sendConns:
	default:
		c = newRawConn(w.dial, w.cfg.Addr, 30*time.Second)
	}
	resp, err := c.do(ctx, method, []byte(path), tok, "", raw, false)
	select {
	case w.sendConns <- c:
	default:
		c.close()
	}
	if err != nil {
		return 0, err
	}
	return resp.Status, nil
}
