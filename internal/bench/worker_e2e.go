package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/gateway"
)

// e2eWorkerConfig configures the load generator of the e2e figure: it
// holds a WebSocket for every member of Convs, sends messages at the
// offered rate of each phase, over HTTP or as a send frame on the sender's
// own WebSocket (the phase says which), and times every push from the send.
type e2eWorkerConfig struct {
	Addr          string // the gateway, host:port
	Secret        string
	Convs         []e2eConv
	SrcIPs        []string
	DatabaseURL   string        // of the commit probe
	ProbeInterval time.Duration // between two probe commits
	MaxInflight   int           // sends in flight; past it a send is dropped (the load is not sustained)
	Deadline      time.Duration
}

type e2eConv struct {
	ID      int64   `json:"id"`
	Members []int64 `json:"members"`
}

// e2ePhaseCmd runs one phase: Rate messages/s for Seconds, then up to
// DrainSeconds for the last pushes; Transport is how the sends go out
// (transportHTTP or transportWS).
type e2ePhaseCmd struct {
	Name         string  `json:"name"`
	Transport    string  `json:"transport"`
	Rate         float64 `json:"rate"`
	Seconds      float64 `json:"seconds"`
	DrainSeconds float64 `json:"drain_seconds"`
}

// E2EPhase is the outcome of one offered load.
type E2EPhase struct {
	Name       string  `json:"name"`
	Transport  string  `json:"transport,omitempty"` // of the sends: "http" (also when empty) or "ws"
	Offered    float64 `json:"offered_msgs_per_sec"`
	Seconds    float64 `json:"seconds"`
	Sent       int64   `json:"sent"`
	Created    int64   `json:"answered_201"`
	Pending    int64   `json:"answered_202"`
	SendErrors int64   `json:"send_errors"`
	Dropped    int64   `json:"dropped"` // not sent: MaxInflight reached
	Achieved   float64 `json:"achieved_msgs_per_sec"`
	Expected   int64   `json:"pushes_expected"`
	Received   int64   `json:"pushes_received"`
	Reconnects int64   `json:"reconnects"`
	Push       Dist    `json:"push"`   // send -> push at each member's WebSocket
	Send       Dist    `json:"send"`   // HTTP send round trip (201 after projection), or send frame -> send_ack
	Commit     Dist    `json:"commit"` // INSERT+COMMIT round trip, same time, same server
	Sustained  bool    `json:"sustained"`
	// The fanout over the phase (the orchestrator fills these in): the
	// share of the time it spent applying batches, and their mean size.
	FanoutBusy     float64 `json:"fanout_busy"`
	FanoutBatchMs  float64 `json:"fanout_batch_mean_ms"`
	FanoutPerBatch float64 `json:"fanout_records_per_batch"`
	// Stages: where a send's time went over the phase, from the
	// gateway's and the fanout's own histograms (stages.go).
	Stages       []StageLatency `json:"stages,omitempty"`
	FirstErrText string         `json:"first_error,omitempty"`
}

// e2ePhaseRec is what a phase records as it runs: the pushes, and the
// commit probe's round trips under the same lock.
type e2ePhaseRec struct {
	pushTimes
	commit []float32
}

type e2eWorker struct {
	cfg       e2eWorkerConfig
	tokens    map[int64]string
	sendConns chan *rawConn // idle keep-alive connections for the sends
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	dialer    *websocket.Dialer
	phases    phaseRecs[e2ePhaseRec]
	reconns   atomic.Int64
	socks     map[int64]*wsSock // every user's current WebSocket, for the WS sends
	acks      sync.Map          // msg_id -> chan wsAck of a WS send waiting for its answer
}

func runE2EWorker(ctx context.Context, cio *childIO, raw []byte) error {
	var cfg e2eWorkerConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	ctx, cancel := withDeadline(ctx, cfg.Deadline)
	defer cancel()
	if cfg.MaxInflight == 0 {
		cfg.MaxInflight = 4000
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = 20 * time.Millisecond
	}
	dial := sourceDialer(cfg.SrcIPs, 10*time.Second)
	w := &e2eWorker{
		cfg:       cfg,
		tokens:    map[int64]string{},
		socks:     map[int64]*wsSock{},
		sendConns: make(chan *rawConn, 4096),
		dial:      dial,
		dialer: &websocket.Dialer{NetDialContext: dial, HandshakeTimeout: 10 * time.Second,
			ReadBufferSize: 4096, WriteBufferSize: 1024},
	}
	for _, c := range cfg.Convs {
		for _, u := range c.Members {
			if _, ok := w.tokens[u]; !ok {
				tok, err := gateway.IssueToken([]byte(cfg.Secret), u, 2*time.Hour)
				if err != nil {
					return err
				}
				w.tokens[u] = tok
				w.socks[u] = &wsSock{}
			}
		}
	}
	// One WebSocket per user, each told apart by its first welcome.
	var fs []*wsFollower
	for u, tok := range w.tokens {
		fs = append(fs, w.follower(u, tok))
	}
	stop, err := followAll(ctx, fs, 64)
	if err != nil {
		return err
	}
	defer stop()
	cio.emit("ready", map[string]int{"connections": len(w.tokens)})

	probe, err := pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("commit probe: %w", err)
	}
	defer probe.Close(context.Background())
	if _, err := probe.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_commit_probe (id bigserial PRIMARY KEY, at timestamptz NOT NULL)`); err != nil {
		return err
	}
	for idx := 0; ; idx++ {
		cmd, ok, err := nextPhase[e2ePhaseCmd](ctx, cio, "e2e")
		if !ok {
			return err
		}
		res, err := w.runPhase(ctx, idx, cmd, probe)
		if err != nil {
			return err
		}
		cio.emit("result", res)
	}
}

// follower is the one WebSocket of user: it times the pushes of bench
// messages and hands the answers of WebSocket sends to their senders.
func (w *e2eWorker) follower(user int64, tok string) *wsFollower {
	sock := w.socks[user]
	return &wsFollower{dialer: w.dialer, addr: w.cfg.Addr, tok: tok, reconns: &w.reconns, conn: sock.set, frame: readFrames(
		func(f *wsFrame) {
			if f.MsgID != "" && (f.Type == "send_ack" || f.Type == "error") {
				w.answer(*f)
			}
		},
		func(e *wsEntry, now int64) {
			if e.Message != nil && e.Message.Body.IsText {
				w.recordPush(e.Message.Body.Text, now)
			}
		})}
}

// recordPush times a push of a body written by benchBody.
func (w *e2eWorker) recordPush(body string, now int64) {
	p, t0, ok := parseBenchBody(body)
	if !ok {
		return
	}
	if rec := w.phases.get(p); rec != nil {
		rec.add(float32(float64(now-t0) / 1e6))
	}
}

func (w *e2eWorker) runPhase(ctx context.Context, idx int, cmd e2ePhaseCmd, probe *pgx.Conn) (E2EPhase, error) {
	rec := &e2ePhaseRec{}
	w.phases.start(idx, rec)
	res := E2EPhase{Name: cmd.Name, Transport: cmd.Transport, Offered: cmd.Rate}
	reconns0 := w.reconns.Load()

	pctx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		w.commitProbe(pctx, probe, rec)
	}()

	limit := newInflightCap(w.cfg.MaxInflight)
	o := offerLoad(ctx, cmd.Rate, cmd.Seconds, limit, func(i int) answer {
		conv := w.cfg.Convs[i%len(w.cfg.Convs)]
		sender := conv.Members[(i/len(w.cfg.Convs))%len(conv.Members)]
		t0 := time.Now()
		body := benchBody(idx, t0)
		var a answer
		if cmd.Transport == transportWS {
			a.Code, a.Err = w.sendWS(ctx, conv.ID, sender, body)
		} else {
			a.Code, a.Err = w.send(ctx, conv.ID, w.tokens[sender], body)
		}
		a.Ms, a.Pushes = msSince(t0), int64(len(conv.Members))
		return a
	})
	rec.drain(ctx, o.Pushes, cmd.DrainSeconds)
	stopProbe()
	<-probeDone
	w.phases.end(idx)

	res.Seconds, res.Sent, res.Created, res.Pending, res.SendErrors, res.Dropped = o.Seconds, o.Sent, o.Applied, o.Pending, o.Errors, o.Dropped
	res.Achieved = float64(res.Created+res.Pending) / res.Seconds
	res.Expected, res.Received = o.Pushes, rec.received.Load()
	res.Reconnects = w.reconns.Load() - reconns0
	res.FirstErrText = o.FirstErr
	res.Send = newDist(f32to64(o.RoundTrips))
	res.Push = rec.dist()
	rec.mu.Lock()
	res.Commit = newDist(f32to64(rec.commit))
	rec.mu.Unlock()
	return res, ctx.Err()
}

// send POSTs one message over an idle keep-alive connection of the pool
// (a new one when none is idle), with the lean client of rawhttp.go: the
// load generator shares the machine with what it measures.
func (w *e2eWorker) send(ctx context.Context, conv int64, tok, body string) (int, error) {
	raw, _ := json.Marshal(map[string]string{"msg_id": uuid.NewString(), "body": body})
	var c *rawConn
	select {
	case c = <-w.sendConns:
	default:
		c = newRawConn(w.dial, w.cfg.Addr, 30*time.Second)
	}
	path := strconv.AppendInt([]byte("/v1/conversations/"), conv, 10)
	path = append(path, "/messages"...)
	resp, err := c.post(ctx, path, tok, raw)
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

// commitProbe times a single-row INSERT (autocommit: INSERT+COMMIT in one
// round trip) every ProbeInterval on the server under test.
func (w *e2eWorker) commitProbe(ctx context.Context, conn *pgx.Conn, rec *e2ePhaseRec) {
	t := time.NewTicker(w.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Not ctx: pgx closes a connection whose query is cancelled.
		qctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t0 := time.Now()
		_, err := conn.Exec(qctx, `INSERT INTO bench_commit_probe (at) VALUES (now())`)
		cancel()
		if err != nil {
			return
		}
		d := float32(float64(time.Since(t0).Microseconds()) / 1000)
		rec.mu.Lock()
		rec.commit = append(rec.commit, d)
		rec.mu.Unlock()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
