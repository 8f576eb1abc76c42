package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxd/inboxd/gateway"
)

// syncWorkerConfig configures the load generator of the sync figures:
// Conns closed-loop clients over as many keep-alive connections.
type syncWorkerConfig struct {
	Addr     string
	Secret   string
	Users    int   // users 1..Users
	Head     int64 // every user's inbox head
	Epoch    int64
	Page     int
	Conns    int
	SrcIPs   []string
	Deadline time.Duration
}

// syncPhaseCmd runs one kind of request for Seconds: "page" (a random page
// of Page entries), "304" (the head with its ETag) or "trivial".
type syncPhaseCmd struct {
	Mode    string  `json:"mode"`
	Seconds float64 `json:"seconds"`
}

// SyncPhase is the outcome of one kind of request.
type SyncPhase struct {
	Mode      string         `json:"mode"`
	Requests  int64          `json:"requests"`
	Seconds   float64        `json:"seconds"`
	PerSec    float64        `json:"requests_per_sec"`
	Errors    int64          `json:"errors"`
	Statuses  map[string]int `json:"statuses"`
	Checked   int64          `json:"pages_checked"`
	BadPages  int64          `json:"bad_pages"`
	Latency   Dist           `json:"latency"`
	FirstErr  string         `json:"first_error,omitempty"`
	RespBytes float64        `json:"mean_response_bytes"`
}

func runSyncWorker(ctx context.Context, cio *childIO, raw []byte) error {
	var cfg syncWorkerConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	ctx, cancel := withDeadline(ctx, cfg.Deadline)
	defer cancel()
	tokens := make([]string, cfg.Users)
	for i := range tokens {
		tok, err := gateway.IssueToken([]byte(cfg.Secret), int64(i+1), 2*time.Hour)
		if err != nil {
			return err
		}
		tokens[i] = tok
	}
	tr := &http.Transport{DialContext: sourceDialer(cfg.SrcIPs, 10*time.Second), MaxConnsPerHost: cfg.Conns,
		MaxIdleConnsPerHost: cfg.Conns, MaxIdleConns: cfg.Conns, IdleConnTimeout: time.Minute, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	cio.emit("ready", nil)
	for {
		line, ok := cio.next(ctx)
		if !ok || line == "quit" {
			return nil
		}
		kind, arg, _ := strings.Cut(line, " ")
		if kind != "phase" {
			return fmt.Errorf("sync worker: unknown command %q", line)
		}
		var cmd syncPhaseCmd
		if err := json.Unmarshal([]byte(arg), &cmd); err != nil {
			return err
		}
		cio.emit("result", runSyncPhase(ctx, cfg, hc, tokens, cmd))
	}
}

func runSyncPhase(ctx context.Context, cfg syncWorkerConfig, hc *http.Client, tokens []string, cmd syncPhaseCmd) SyncPhase {
	res := SyncPhase{Mode: cmd.Mode, Statuses: map[string]int{}}
	var (
		mu                       sync.Mutex
		lat                      []float32
		reqs, errs, checked, bad atomic.Int64
		bytes                    atomic.Int64
		firstErr                 atomic.Value
		wg                       sync.WaitGroup
	)
	wantStatus := http.StatusOK
	if cmd.Mode == "304" {
		wantStatus = http.StatusNotModified
	}
	etag := `"` + strconv.FormatInt(cfg.Epoch, 10) + "." + strconv.FormatInt(cfg.Head, 10) + `"`
	start := time.Now()
	end := start.Add(time.Duration(cmd.Seconds * float64(time.Second)))
	for c := 0; c < cfg.Conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(c), uint64(start.UnixNano())))
			local := make([]float32, 0, 4096)
			statuses := map[string]int{}
			for n := 0; time.Now().Before(end) && ctx.Err() == nil; n++ {
				u := rnd.IntN(cfg.Users)
				var url string
				switch cmd.Mode {
				case "page":
					after := rnd.Int64N(cfg.Head - int64(cfg.Page) + 1)
					url = fmt.Sprintf("http://%s/v1/sync?after=%d&limit=%d", cfg.Addr, after, cfg.Page)
				case "304":
					url = fmt.Sprintf("http://%s/v1/sync?after=%d&epoch=%d", cfg.Addr, cfg.Head, cfg.Epoch)
				default:
					url = "http://" + cfg.Addr + "/bench/trivial"
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
				req.Header.Set("Authorization", "Bearer "+tokens[u])
				if cmd.Mode == "304" {
					req.Header.Set("If-None-Match", etag)
				}
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
					continue
				}
				// Every 64th page is decoded and checked; the rest are read.
				check := cmd.Mode == "page" && n%64 == 0 && resp.StatusCode == http.StatusOK
				var nb int64
				if check {
					var page struct {
						Entries []json.RawMessage `json:"entries"`
					}
					cr := &countReader{r: resp.Body}
					if json.NewDecoder(cr).Decode(&page) != nil || len(page.Entries) != cfg.Page {
						bad.Add(1)
					}
					discard(cr)
					nb = cr.n
					checked.Add(1)
				} else {
					cr := &countReader{r: resp.Body}
					discard(cr)
					nb = cr.n
				}
				resp.Body.Close()
				d := float32(float64(time.Since(t0).Microseconds()) / 1000)
				statuses[strconv.Itoa(resp.StatusCode)]++
				if resp.StatusCode != wantStatus {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("HTTP %d for %s", resp.StatusCode, url))
					continue
				}
				reqs.Add(1)
				bytes.Add(nb)
				local = append(local, d)
			}
			mu.Lock()
			lat = append(lat, local...)
			for k, v := range statuses {
				res.Statuses[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	res.Requests, res.Errors, res.Checked, res.BadPages = reqs.Load(), errs.Load(), checked.Load(), bad.Load()
	res.PerSec = float64(res.Requests) / res.Seconds
	res.RespBytes = div(float64(bytes.Load()), float64(res.Requests))
	res.Latency = newDist(f32to64(lat))
	res.Latency.CDF = nil
	if v, ok := firstErr.Load().(string); ok {
		res.FirstErr = v
	}
	return res
}

type countReader struct {
	r interface{ Read([]byte) (int, error) }
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
