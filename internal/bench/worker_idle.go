package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/inboxd/inboxd/gateway"
)

// idleWorkerConfig configures a holder of idle WebSockets: Count
// connections of users FirstUser.., from the source addresses SrcIPs.
type idleWorkerConfig struct {
	Addr      string
	Secret    string // empty: no token (the echo server)
	FirstUser int64
	Count     int
	SrcIPs    []string
	// Parallel bounds the handshakes in flight [128].
	Parallel int
	Deadline time.Duration
}

// idleReady is the worker's "ready" line.
type idleReady struct {
	Connected int     `json:"connected"`
	Failed    int     `json:"failed"`
	FirstErr  string  `json:"first_error,omitempty"`
	Seconds   float64 `json:"seconds"`
}

// runIdleWorker opens the connections, each with a hello answered by the
// server (the gateway's welcome, or the echo of the hello), holds them,
// reading (so pings are answered), until "stop" or the deadline.
func runIdleWorker(ctx context.Context, cio *childIO, raw []byte) error {
	var cfg idleWorkerConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = 128
	}
	ctx, cancel := withDeadline(ctx, cfg.Deadline)
	defer cancel()
	d := &websocket.Dialer{NetDialContext: sourceDialer(cfg.SrcIPs, 15*time.Second), HandshakeTimeout: 15 * time.Second,
		ReadBufferSize: 512, WriteBufferSize: 512}
	var (
		mu       sync.Mutex
		conns    []*websocket.Conn
		failed   atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, cfg.Parallel)
	start := time.Now()
	hello, _ := json.Marshal(wsHello{Type: "hello"})
	for i := 0; i < cfg.Count && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var hdr http.Header
			if cfg.Secret != "" {
				tok, err := gateway.IssueToken([]byte(cfg.Secret), cfg.FirstUser+int64(i), 2*time.Hour)
				if err != nil {
					failed.Add(1)
					return
				}
				hdr = http.Header{"Authorization": {"Bearer " + tok}}
			}
			c, _, err := d.DialContext(ctx, "ws://"+cfg.Addr+"/v1/ws", hdr)
			if err == nil {
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
				if err = c.WriteMessage(websocket.TextMessage, hello); err == nil {
					var msg []byte
					if _, msg, err = c.ReadMessage(); err == nil && cfg.Secret != "" {
						// The gateway's welcome; anything else (an error
						// frame before a close) is a refusal.
						var f wsFrame
						if json.Unmarshal(msg, &f) != nil || f.Type != "welcome" {
							err = fmt.Errorf("first frame %.200s", msg)
						}
					}
				}
				if err != nil {
					c.Close()
				}
			}
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			_ = c.SetReadDeadline(time.Time{})
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			// Hold: read whatever comes (heartbeats; pings answered by
			// gorilla's default handler) until the connection ends.
			go func() {
				for {
					if _, _, err := c.NextReader(); err != nil {
						return
					}
				}
			}()
		}()
	}
	wg.Wait()
	r := idleReady{Connected: len(conns), Failed: int(failed.Load()), Seconds: time.Since(start).Seconds()}
	if v, ok := firstErr.Load().(string); ok {
		r.FirstErr = v
	}
	cio.emit("ready", r)
	for {
		line, ok := cio.next(ctx)
		if !ok || line == "stop" {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return nil
}
