package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/inboxd/inboxd/gateway"
)

// largeWorkerConfig configures a load generator of the large figure. Role
// "recv" holds a WebSocket for each of Users (hello with "large": true),
// tracks per conversation the seqs it is pushed and times the pushes of
// bench messages; role "send" sends them over HTTP at the rates of each
// phase: into LargeConv from LargeSenders, and into the Small
// conversations from their first member.
type largeWorkerConfig struct {
	Role         string
	Addr         string
	Secret       string
	Users        []int64 // recv
	Heads        []int64 // recv: each user's inbox head, the after of its first hello
	LargeConv    int64
	LargeSenders []int64   // send
	Small        []e2eConv // send: Members[0] sends
	SrcIPs       []string
	Parallel     int // recv: handshakes in flight [32]
	MaxInflight  int // send: sends in flight, past it a send is dropped [500]
	Nice         int // recv: the process's scheduling priority (setpriority)
	Deadline     time.Duration
}

// largePhaseCmd is a phase of the sender: LargeRate messages/s into the
// large conversation and SmallRate into the small ones, for Seconds.
type largePhaseCmd struct {
	Idx       int     `json:"idx"`
	LargeRate float64 `json:"large_rate"`
	SmallRate float64 `json:"small_rate"`
	Seconds   float64 `json:"seconds"`
}

// largeSendResult is the sender's outcome of a phase.
type largeSendResult struct {
	Seconds    float64 `json:"seconds"`
	LargeSent  int64   `json:"large_sent"`
	LargeOK    int64   `json:"large_ok"`
	SmallSent  int64   `json:"small_sent"`
	SmallOK    int64   `json:"small_ok"`
	Errors     int64   `json:"errors"`
	Dropped    int64   `json:"dropped"`
	FirstErr   string  `json:"first_error,omitempty"`
	LargeSend  Dist    `json:"large_send"` // HTTP round trip of a send
	SmallSend  Dist    `json:"small_send"`
	SmallPushN int64   `json:"small_pushes_expected"` // accepted small sends x their connected members
}

func runLargeWorker(ctx context.Context, cio *childIO, raw []byte) error {
	var cfg largeWorkerConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	if cfg.Nice != 0 {
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, cfg.Nice)
	}
	ctx, cancel := withDeadline(ctx, cfg.Deadline)
	defer cancel()
	switch cfg.Role {
	case "recv":
		return runLargeRecv(ctx, cio, cfg)
	case "send":
		return runLargeSend(ctx, cio, cfg)
	}
	return fmt.Errorf("large worker: unknown role %q", cfg.Role)
}

func runLargeSend(ctx context.Context, cio *childIO, cfg largeWorkerConfig) error {
	if cfg.MaxInflight == 0 {
		// Each send in flight is a connection of the gateway, which holds
		// the WebSockets too under one open-files limit.
		cfg.MaxInflight = 500
	}
	dial := sourceDialer(cfg.SrcIPs, 10*time.Second)
	sw := &e2eWorker{cfg: e2eWorkerConfig{Addr: cfg.Addr}, sendConns: make(chan *rawConn, 4096), dial: dial}
	tokens := map[int64]string{}
	tok := func(u int64) (string, error) {
		if t, ok := tokens[u]; ok {
			return t, nil
		}
		t, err := gateway.IssueToken([]byte(cfg.Secret), u, 2*time.Hour)
		tokens[u] = t
		return t, err
	}
	for _, u := range cfg.LargeSenders {
		if _, err := tok(u); err != nil {
			return err
		}
	}
	for _, c := range cfg.Small {
		if _, err := tok(c.Members[0]); err != nil {
			return err
		}
	}
	cio.emit("ready", nil)
	for {
		cmd, ok, err := nextPhase[largePhaseCmd](ctx, cio, "large")
		if !ok {
			return err
		}
		cio.emit("result", largeSendPhase(ctx, sw, cfg, tokens, cmd))
	}
}

func largeSendPhase(ctx context.Context, sw *e2eWorker, cfg largeWorkerConfig, tokens map[int64]string, cmd largePhaseCmd) largeSendResult {
	limit := newInflightCap(cfg.MaxInflight)
	// send is one request; a status other than 201, 200 or 202 is an
	// error named by the kind of conversation.
	send := func(conv, sender int64, kind byte, pushes int64) answer {
		t0 := time.Now()
		a := answer{Pushes: pushes}
		a.Code, a.Err = sw.send(ctx, conv, tokens[sender], fmt.Sprintf("%cb:%d:%d", kind, cmd.Idx, t0.UnixNano()))
		a.Ms = msSince(t0)
		if a.Err == nil && a.Code != http.StatusCreated && a.Code != http.StatusOK && a.Code != http.StatusAccepted {
			a.Err = fmt.Errorf("HTTP %d", a.Code)
		}
		if a.Err != nil {
			a.Err = fmt.Errorf("%c send: %v", kind, a.Err)
		}
		return a
	}
	var large, small offered
	var loops sync.WaitGroup
	if len(cfg.LargeSenders) > 0 && cmd.LargeRate > 0 {
		loops.Go(func() {
			large = offerLoad(ctx, cmd.LargeRate, cmd.Seconds, limit, func(i int) answer {
				return send(cfg.LargeConv, cfg.LargeSenders[i%len(cfg.LargeSenders)], 'l', 0)
			})
		})
	}
	if len(cfg.Small) > 0 && cmd.SmallRate > 0 {
		loops.Go(func() {
			small = offerLoad(ctx, cmd.SmallRate, cmd.Seconds, limit, func(i int) answer {
				c := cfg.Small[i%len(cfg.Small)]
				return send(c.ID, c.Members[0], 's', int64(len(c.Members)-1))
			})
		})
	}
	loops.Wait()
	// The phase lasted as long as its longer schedule, the answers
	// still in flight after it aside.
	res := largeSendResult{Seconds: max(large.Seconds, small.Seconds),
		LargeSent: large.Sent, LargeOK: large.Applied + large.Pending, SmallSent: small.Sent, SmallOK: small.Applied + small.Pending,
		Errors: large.Errors + small.Errors, Dropped: large.Dropped + small.Dropped, SmallPushN: small.Pushes,
		FirstErr: cmp.Or(large.FirstErr, small.FirstErr)}
	res.LargeSend = newDist(f32to64(large.RoundTrips))
	res.SmallSend = newDist(f32to64(small.RoundTrips))
	return res
}
