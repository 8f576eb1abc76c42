package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
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
	// One lean keep-alive client per connection (rawhttp.go): net/http's
	// client would take a large share of the cores it measures.
	dial := sourceDialer(cfg.SrcIPs, 10*time.Second)
	conns := make([]*rawConn, cfg.Conns)
	for i := range conns {
		conns[i] = newRawConn(dial, cfg.Addr, 30*time.Second)
	}
	defer func() {
		for _, c := range conns {
			c.close()
		}
	}()
	cio.emit("ready", nil)
	for {
		cmd, ok, err := nextPhase[syncPhaseCmd](ctx, cio, "sync")
		if !ok {
			return err
		}
		cio.emit("result", runSyncPhase(ctx, cfg, conns, tokens, cmd))
	}
}

// runSyncPhase runs cmd over conns, one closed-loop client each.
func runSyncPhase(ctx context.Context, cfg syncWorkerConfig, conns []*rawConn, tokens []string, cmd syncPhaseCmd) SyncPhase {
	res := SyncPhase{Mode: cmd.Mode, Statuses: map[string]int{}}
	var (
		mu       sync.Mutex
		lat      []float32
		firstErr atomic.Value
		wg       sync.WaitGroup
	)
	wantStatus := http.StatusOK
	etag := ""
	var fixedPath []byte
	switch cmd.Mode {
	case "page": // a random page per request, below
	case "304":
		wantStatus = http.StatusNotModified
		etag = `"` + strconv.FormatInt(cfg.Epoch, 10) + "." + strconv.FormatInt(cfg.Head, 10) + `"`
		fixedPath = fmt.Appendf(nil, "/v1/sync?after=%d&epoch=%d", cfg.Head, cfg.Epoch)
	default:
		fixedPath = []byte("/bench/trivial")
	}
	start := time.Now()
	end := start.Add(time.Duration(cmd.Seconds * float64(time.Second)))
	for c, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(c), uint64(start.UnixNano())))
			local := make([]float32, 0, 4096)
			statuses := map[int]int{}
			var reqs, errs, checked, bad, nb int64
			path := make([]byte, 0, 128)
			t0 := time.Now()
			for n := 0; t0.Before(end) && ctx.Err() == nil; n++ {
				u := rnd.IntN(cfg.Users)
				path = append(path[:0], fixedPath...)
				if cmd.Mode == "page" {
					after := rnd.Int64N(cfg.Head - int64(cfg.Page) + 1)
					path = append(path, "/v1/sync?after="...)
					path = strconv.AppendInt(path, after, 10)
					path = append(path, "&limit="...)
					path = strconv.AppendInt(path, int64(cfg.Page), 10)
				}
				// Every 64th page is decoded and checked; the rest are
				// read and counted.
				check := cmd.Mode == "page" && n%64 == 0
				resp, err := conn.get(ctx, path, tokens[u], etag, check)
				if err != nil {
					if ctx.Err() == nil {
						errs++
						if firstErr.Load() == nil {
							firstErr.CompareAndSwap(nil, err.Error())
						}
					}
					t0 = time.Now()
					continue
				}
				if check && resp.Status == http.StatusOK {
					var page struct {
						Entries []json.RawMessage `json:"entries"`
					}
					if json.Unmarshal(resp.Body, &page) != nil || len(page.Entries) != cfg.Page {
						bad++
					}
					checked++
				}
				t1 := time.Now()
				d := float32(float64(t1.Sub(t0).Microseconds()) / 1000)
				t0 = t1
				statuses[resp.Status]++
				if resp.Status != wantStatus {
					errs++
					if firstErr.Load() == nil {
						firstErr.CompareAndSwap(nil, fmt.Sprintf("HTTP %d for http://%s%s", resp.Status, cfg.Addr, path))
					}
					continue
				}
				reqs++
				nb += resp.N
				local = append(local, d)
			}
			mu.Lock()
			res.Requests += reqs
			res.Errors += errs
			res.Checked += checked
			res.BadPages += bad
			res.RespBytes += float64(nb) // a sum until the end
			lat = append(lat, local...)
			for k, v := range statuses {
				res.Statuses[strconv.Itoa(k)] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	res.PerSec = float64(res.Requests) / res.Seconds
	res.RespBytes = div(res.RespBytes, float64(res.Requests))
	res.Latency = newDist(f32to64(lat))
	res.Latency.CDF = nil
	if v, ok := firstErr.Load().(string); ok {
		res.FirstErr = v
	}
	return res
}
