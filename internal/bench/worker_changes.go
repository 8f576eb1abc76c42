package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
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
	mu   sync.Mutex
	ts   []int64
	seen map[int64]int
}

type changesPhaseRec struct {
	mode     string
	edits    map[int64]*convEdits // by conversation; the map is read-only
	mu       sync.Mutex
	push     []float32
	request  []float32
	received atomic.Int64
}

type changesWorker struct {
	cfg       changesWorkerConfig
	tokens    map[int64]string
	conv      map[int64]int64 // user -> its conversation
	first     map[int64]int64 // conversation -> seq of its first message
	sendConns chan *rawConn
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	dialer    *websocket.Dialer
	mu        sync.Mutex
	phases    map[int]*changesPhaseRec
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
		phases: map[int]*changesPhaseRec{}, sendConns: make(chan *rawConn, 4096), dial: dial,
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
	var welcomed sync.WaitGroup
	welcomed.Add(len(w.tokens))
	rctx, stopReceivers := context.WithCancel(ctx)
	var receivers sync.WaitGroup
	sem := make(chan struct{}, 64)
	for u, tok := range w.tokens {
		receivers.Add(1)
		go func() {
			defer receivers.Done()
			w.receive(rctx, u, tok, sem, welcomed.Done)
		}()
	}
	defer func() { stopReceivers(); receivers.Wait() }()
	if err := waitGroupCtx(ctx, &welcomed); err != nil {
		return fmt.Errorf("connect %d WebSockets: %w", len(w.tokens), err)
	}
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

// changesFrame is what the worker reads of the server's frames.
type changesFrame struct {
	Type    string `json:"type"`
	Head    int64  `json:"head"`
	Entries []struct {
		InboxSeq       int64  `json:"inbox_seq"`
		ConversationID int64  `json:"conversation_id"`
		Kind           string `json:"kind"`
		Message        *struct {
			SenderID int64           `json:"sender_id"`
			Body     json.RawMessage `json:"body"` // a string, or a system message's object
		} `json:"message"`
	} `json:"entries"`
}

// receive keeps one user's WebSocket up and times the pushes of the
// bench's sends and edits.
func (w *changesWorker) receive(ctx context.Context, user int64, tok string, sem chan struct{}, welcomed func()) {
	f := &wsFollower{dialer: w.dialer, addr: w.cfg.Addr, reconns: &w.reconns, frame: func(data []byte, now int64) (string, int64) {
		var f changesFrame
		if json.Unmarshal(data, &f) != nil {
			return "", 0
		}
		cursor := f.Head
		if f.Type == "entries" {
			cursor = 0
			for _, e := range f.Entries {
				cursor = max(cursor, e.InboxSeq)
				if e.Message == nil || e.Message.SenderID == user {
					continue
				}
				var body string
				if json.Unmarshal(e.Message.Body, &body) == nil {
					w.record(user, e.ConversationID, e.Kind, body, now)
				}
			}
		}
		return f.Type, cursor
	}}
	f.follow(ctx, tok, sem, welcomed)
}

// record times an entry whose body is "bench:<phase>:<request unix ns>":
// a message entry in a send phase, an update entry in an edit phase.
func (w *changesWorker) record(user, conv int64, kind, body string, now int64) {
	rest, ok := strings.CutPrefix(body, "bench:")
	if !ok {
		return
	}
	ps, ts, ok := strings.Cut(rest, ":")
	if !ok {
		return
	}
	p, err1 := strconv.Atoi(ps)
	t0, err2 := strconv.ParseInt(ts, 10, 64)
	if err1 != nil || err2 != nil {
		return
	}
	w.mu.Lock()
	rec := w.phases[p]
	w.mu.Unlock()
	if rec == nil {
		return
	}
	switch {
	case rec.mode == "send" && kind == "message":
		rec.mu.Lock()
		rec.push = append(rec.push, float32(float64(now-t0)/1e6))
		rec.mu.Unlock()
		rec.received.Add(1)
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
			rec.mu.Lock()
			rec.push = append(rec.push, lat...)
			rec.mu.Unlock()
			rec.received.Add(int64(len(lat)))
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
	w.mu.Lock()
	w.phases[idx] = rec
	w.mu.Unlock()
	res := ChangesPhase{Name: cmd.Name, Mode: cmd.Mode, Offered: cmd.Rate}
	reconns0 := w.reconns.Load()

	var (
		sent, applied, pending, errs, dropped, expected atomic.Int64
		inflight                                        atomic.Int64
		wg                                              sync.WaitGroup
		firstErr                                        atomic.Value
	)
	interval := time.Duration(float64(time.Second) / cmd.Rate)
	start := time.Now()
	end := start.Add(time.Duration(cmd.Seconds * float64(time.Second)))
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if !at.Before(end) || ctx.Err() != nil {
			break
		}
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		if inflight.Load() >= int64(w.cfg.MaxInflight) {
			dropped.Add(1)
			continue
		}
		conv := w.cfg.Convs[i%len(w.cfg.Convs)]
		from := conv.Members[0] // the sender of the first message: the one who may edit it
		if cmd.Mode == "send" {
			from = conv.Members[(i/len(w.cfg.Convs))%len(conv.Members)]
		}
		inflight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer inflight.Add(-1)
			sent.Add(1)
			var (
				code int
				err  error
				t0   time.Time
			)
			if cmd.Mode == "send" {
				t0 = time.Now()
				code, err = w.request(ctx, "POST", fmt.Sprintf("/v1/conversations/%d/messages", conv.ID), w.tokens[from],
					map[string]string{"msg_id": uuid.NewString(), "body": fmt.Sprintf("bench:%d:%d", idx, t0.UnixNano())})
			} else {
				// The request time joins the message's list before the
				// request, in the order of the requests, so that a push
				// of a later edit also delivers this one.
				ce := rec.edits[conv.ID]
				ce.mu.Lock()
				t0 = time.Now()
				ce.ts = append(ce.ts, t0.UnixNano())
				ce.mu.Unlock()
				code, err = w.request(ctx, "PATCH", fmt.Sprintf("/v1/conversations/%d/messages/%d", conv.ID, w.first[conv.ID]), w.tokens[from],
					map[string]string{"change_id": uuid.NewString(), "body": fmt.Sprintf("bench:%d:%d", idx, t0.UnixNano())})
			}
			d := float32(float64(time.Since(t0).Microseconds()) / 1000)
			switch {
			case err == nil && (code == http.StatusCreated || code == http.StatusOK):
				applied.Add(1)
			case err == nil && code == http.StatusAccepted:
				pending.Add(1)
			default:
				errs.Add(1)
				if err == nil {
					err = fmt.Errorf("HTTP %d", code)
				}
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			expected.Add(int64(len(conv.Members) - 1))
			rec.mu.Lock()
			rec.request = append(rec.request, d)
			rec.mu.Unlock()
		}()
	}
	res.Seconds = time.Since(start).Seconds()
	wg.Wait()
	drainEnd := time.Now().Add(time.Duration(cmd.DrainSeconds * float64(time.Second)))
	for rec.received.Load() < expected.Load() && time.Now().Before(drainEnd) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	w.mu.Lock()
	delete(w.phases, idx) // later pushes of this phase are not counted
	w.mu.Unlock()

	res.Sent, res.Applied, res.Pending, res.Errors, res.Dropped = sent.Load(), applied.Load(), pending.Load(), errs.Load(), dropped.Load()
	res.Achieved = float64(res.Applied+res.Pending) / res.Seconds
	res.Expected, res.Received = expected.Load(), rec.received.Load()
	res.Reconnects = w.reconns.Load() - reconns0
	if v, ok := firstErr.Load().(string); ok {
		res.FirstErr = v
	}
	rec.mu.Lock()
	res.Push = newDist(f32to64(rec.push))
	res.Request = newDist(f32to64(rec.request))
	rec.mu.Unlock()
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
