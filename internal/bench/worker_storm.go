package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/inboxd/inboxd/client"
	"github.com/inboxd/inboxd/gateway"
)

// stormWorkerConfig configures the clients of the reconnect storm: Count
// clients of users FirstUser.., each the SDK (client package, defaults but
// StablePeriod) or a naive client that reconnects at once, forever.
type stormWorkerConfig struct {
	Addr      string
	Secret    string
	FirstUser int64
	Count     int
	Mode      string // "sdk", "sdk-hints", "sdk-kill" (the SDK, defaults), "sdk-ws" (the SDK on WebSocket only) or "naive"
	SrcIPs    []string
	BucketMS  int
	// StablePeriod of the SDK: how long a connection must have lasted to
	// count as stable. The bench holds the connections longer than this
	// before the cut, so that they stand for long-lived ones.
	StablePeriod time.Duration
	// Nice lowers the worker's scheduling priority, so that the clients,
	// which stand for devices on other machines, take the CPU from the
	// gateway less.
	Nice     int
	Deadline time.Duration
}

// stormSeries is a worker's record: per bucket of BucketMS from StartMS
// (unix ms), the requests it made (WebSocket handshakes attempted, TCP
// connects refused included, and HTTP requests) and its clients connected
// at the bucket's end.
type stormSeries struct {
	StartMS     int64   `json:"start_unix_ms"`
	BucketMS    int     `json:"bucket_ms"`
	Attempts    []int32 `json:"attempts"`
	Connected   []int32 `json:"connected"`
	RecoveredMS int64   `json:"recovered_unix_ms"` // every client up again after the cut; 0: not all
	Recovered   int     `json:"recovered"`         // clients up again after the cut
	Polling     int     `json:"polling"`           // SDK clients up on long-polling at the end
}

type stormClient struct {
	mu      sync.Mutex
	up      bool
	upAt    int64 // unix ns of the last connection
	polling bool
}

type stormWorker struct {
	cfg       stormWorkerConfig
	start     time.Time
	attempts  []atomic.Int32
	connected atomic.Int32
	clients   []*stormClient
	cut       atomic.Int64 // unix ns
}

func (w *stormWorker) bucket() int {
	i := int(time.Since(w.start).Milliseconds()) / w.cfg.BucketMS
	return min(i, len(w.attempts)-1)
}

func (w *stormWorker) attempt() { w.attempts[w.bucket()].Add(1) }

func (w *stormWorker) setUp(c *stormClient, up, polling bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if up == c.up {
		return
	}
	c.up = up
	if up {
		c.upAt = time.Now().UnixNano()
		c.polling = polling
		w.connected.Add(1)
	} else {
		w.connected.Add(-1)
	}
}

// recovered counts the clients up on a connection made after the cut.
func (w *stormWorker) recovered() (n, polling int) {
	cut := w.cut.Load()
	for _, c := range w.clients {
		c.mu.Lock()
		if c.up && c.upAt > cut {
			n++
			if c.polling {
				polling++
			}
		}
		c.mu.Unlock()
	}
	return n, polling
}

func runStormWorker(ctx context.Context, cio *childIO, raw []byte) error {
	var cfg stormWorkerConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	if cfg.BucketMS == 0 {
		cfg.BucketMS = 100
	}
	if cfg.Deadline == 0 {
		cfg.Deadline = 5 * time.Minute
	}
	if cfg.Nice != 0 {
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, cfg.Nice)
	}
	ctx, cancel := withDeadline(ctx, cfg.Deadline)
	defer cancel()
	w := &stormWorker{cfg: cfg, start: time.Now(),
		attempts: make([]atomic.Int32, int(cfg.Deadline.Milliseconds())/cfg.BucketMS+1)}
	w.cut.Store(1 << 62)
	connected := make([]int32, len(w.attempts))
	for i := range connected {
		connected[i] = -1 // not sampled
	}

	base := sourceDialer(cfg.SrcIPs, 10*time.Second)
	counting := func(ctx context.Context, network, addr string) (net.Conn, error) {
		w.attempt()
		return base(ctx, network, addr)
	}
	tr := &http.Transport{DialContext: base, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}
	hc := &http.Client{Transport: countingRT{w: w, rt: tr}}
	dialer := &websocket.Dialer{NetDialContext: counting, HandshakeTimeout: 10 * time.Second,
		ReadBufferSize: 1024, WriteBufferSize: 1024}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	cctx, stopClients := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopClients(); wg.Wait(); tr.CloseIdleConnections() }()
	for i := 0; i < cfg.Count; i++ {
		c := &stormClient{}
		w.clients = append(w.clients, c)
		tok, err := gateway.IssueToken([]byte(cfg.Secret), cfg.FirstUser+int64(i), 2*time.Hour)
		if err != nil {
			return err
		}
		switch cfg.Mode {
		case "sdk", "sdk-ws", "sdk-hints", "sdk-kill":
			tr := client.TransportAuto
			if cfg.Mode == "sdk-ws" {
				tr = client.TransportWebSocket
			}
			cl, err := client.New(client.Config{
				BaseURL: "http://" + cfg.Addr, Token: tok, HTTPClient: hc, Dialer: dialer, Logger: quiet,
				StablePeriod: cfg.StablePeriod, Transport: tr,
				Handler: client.Handler{OnStatus: func(s client.Status) {
					w.setUp(c, s.State == client.StateConnected, s.Transport == "polling")
				}},
			})
			if err != nil {
				return err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := cl.Run(cctx); err != nil && cctx.Err() == nil {
					logf("sdk client %d: %v", cfg.FirstUser+int64(i), err)
				}
			}()
		case "naive":
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.naive(cctx, dialer, c, tok)
			}()
		default:
			return fmt.Errorf("storm worker: unknown mode %q", cfg.Mode)
		}
	}

	// The sampler: the connected gauge per bucket, and the recovery.
	var (
		readyOnce, recOnce sync.Once
		readyc             = make(chan struct{})
		recMS              atomic.Int64
		recN, recPoll      atomic.Int64
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Duration(cfg.BucketMS) * time.Millisecond / 2)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
			}
			n := w.connected.Load()
			connected[w.bucket()] = n
			if int(n) == cfg.Count {
				readyOnce.Do(func() { close(readyc) })
			}
			if w.cut.Load() < 1<<62 {
				r, p := w.recovered()
				recN.Store(int64(r))
				recPoll.Store(int64(p))
				if r == cfg.Count {
					recOnce.Do(func() {
						recMS.Store(time.Now().UnixMilli())
						cio.emit("recovered", strconv.FormatInt(time.Now().UnixMilli(), 10))
					})
				}
			}
		}
	}()
	select {
	case <-readyc:
	case <-time.After(2 * time.Minute):
	case <-ctx.Done():
		return ctx.Err()
	}
	cio.emit("ready", map[string]int{"connected": int(w.connected.Load())})
	for {
		line, ok := cio.next(ctx)
		if !ok {
			return ctx.Err()
		}
		kind, arg, _ := strings.Cut(line, " ")
		switch kind {
		case "cut":
			ns, err := strconv.ParseInt(arg, 10, 64)
			if err != nil {
				return err
			}
			w.cut.Store(ns)
		case "stop":
			end := w.bucket() + 1
			res := stormSeries{StartMS: w.start.UnixMilli(), BucketMS: cfg.BucketMS, RecoveredMS: recMS.Load(),
				Recovered: int(recN.Load()), Polling: int(recPoll.Load())}
			for i := 0; i < end; i++ {
				res.Attempts = append(res.Attempts, w.attempts[i].Load())
			}
			// A bucket the sampler did not visit keeps the gauge of the last.
			for i := 0; i < end; i++ {
				if connected[i] < 0 {
					connected[i] = 0
					if i > 0 {
						connected[i] = connected[i-1]
					}
				}
			}
			res.Connected = connected[:end]
			cio.emit("result", res)
			return nil
		default:
			return fmt.Errorf("storm worker: unknown command %q", line)
		}
	}
}

// naive is a client without backoff: it reconnects the moment a connection
// fails or ends, whatever the server said.
func (w *stormWorker) naive(ctx context.Context, d *websocket.Dialer, c *stormClient, tok string) {
	hdr := http.Header{"Authorization": {"Bearer " + tok}}
	var after int64
	for ctx.Err() == nil {
		conn, _, err := d.DialContext(ctx, "ws://"+w.cfg.Addr+"/v1/ws", hdr)
		if err != nil {
			continue
		}
		if err := conn.WriteJSON(wsHello{Type: "hello", After: after}); err != nil {
			conn.Close()
			continue
		}
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				break
			}
			var f wsFrame
			if json.Unmarshal(data, &f) != nil {
				continue
			}
			switch f.Type {
			case "welcome":
				w.setUp(c, true, false)
			case "too_long":
				after = f.Head
			case "entries":
				for _, e := range f.Entries {
					after = max(after, e.InboxSeq)
				}
			}
		}
		stop()
		conn.Close()
		w.setUp(c, false, false)
	}
}

// countingRT counts the SDK's HTTP requests as attempts.
type countingRT struct {
	w  *stormWorker
	rt http.RoundTripper
}

func (c countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.w.attempt()
	return c.rt.RoundTrip(r)
}
