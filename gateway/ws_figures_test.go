package gateway

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/protocol"
)

// The figures of issue 9, measured only on request:
//
//	go test ./gateway/ -run TestWSFigures -wsfigures -v -timeout 20m
//
// They run the whole pipeline in one process (kfake, fanout, PostgreSQL
// started by the test, the gateway and every client), so the machine's
// cores are shared by all of it: read them as an upper bound.
var (
	wsFigures      = flag.Bool("wsfigures", false, "measure the WebSocket figures (latency at a send rate, memory per idle connection, delivery to a big group)")
	wsFigRate      = flag.Int("wsfigures.rate", 1000, "messages per second of the latency figure")
	wsFigSeconds   = flag.Int("wsfigures.seconds", 10, "duration of the latency figure")
	wsFigConns     = flag.Int("wsfigures.conns", 2000, "idle connections of the memory figure (each costs two file descriptors here: client and server)")
	wsFigGroup     = flag.Int("wsfigures.group", 500, "members of the big group")
	wsFigGroupRuns = flag.Int("wsfigures.groupruns", 5, "messages timed in the big group")
)

func quantiles(ms []float64) string {
	if len(ms) == 0 {
		return "no samples"
	}
	slices.Sort(ms)
	q := func(p float64) float64 { return ms[min(len(ms)-1, int(p*float64(len(ms))))] }
	return fmt.Sprintf("n=%d p50=%.1fms p90=%.1fms p99=%.1fms max=%.1fms", len(ms), q(.5), q(.9), q(.99), ms[len(ms)-1])
}

func TestWSFigures(t *testing.T) {
	if !*wsFigures {
		t.Skip("figures only with -wsfigures")
	}
	t.Run("latency", wsFigureLatency)
	t.Run("idle memory", wsFigureIdleMemory)
	t.Run("big group", wsFigureBigGroup)
}

// figClient is a measuring client: it reads entries and records, for the
// message ids in sentAt, the time from the send to the push.
type figClient struct {
	c    *wsClient
	mu   sync.Mutex
	lat  []float64 // send to push, of others' messages
	ack  []float64 // send to send_ack, of its own
	seen map[string]time.Time
	done chan struct{}
}

func startFigClient(t testing.TB, w *wsgw, u *user, sentAt *sync.Map) *figClient {
	t.Helper()
	c := dialWS(t, w, u)
	fc := &figClient{c: c, seen: map[string]time.Time{}, done: make(chan struct{})}
	c.hello(t, u.head(t), nil)
	go func() {
		defer close(fc.done)
		for {
			_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Minute))
			_, raw, err := c.conn.ReadMessage()
			if err != nil {
				return
			}
			now := time.Now()
			var f protocol.ServerFrame
			if json.Unmarshal(raw, &f) != nil {
				continue
			}
			if f.Type == protocol.FrameSendAck {
				if v, ok := sentAt.Load(f.MsgID); ok {
					fc.mu.Lock()
					fc.ack = append(fc.ack, float64(now.Sub(v.(time.Time)).Microseconds())/1000)
					fc.mu.Unlock()
				}
				continue
			}
			if f.Type != protocol.FrameEntries {
				continue
			}
			fc.mu.Lock()
			for _, e := range f.Entries {
				if e.Message == nil {
					continue
				}
				fc.seen[e.Message.MsgID] = now
				if v, ok := sentAt.Load(e.Message.MsgID); ok && e.Message.SenderID != u.id {
					fc.lat = append(fc.lat, float64(now.Sub(v.(time.Time)).Microseconds())/1000)
				}
			}
			fc.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = c.conn.Close()
		<-fc.done
	})
	return fc
}

// wsFigureLatency: conversations of 7 members; one member of each sends
// over its socket, all together at -wsfigures.rate messages per second;
// the other six measure send (frame written) to push (frame read).
func wsFigureLatency(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{})
	const members = 7
	convs := max(10, *wsFigRate/25) // about 25 messages/s per conversation
	var sentAt sync.Map
	type conv struct {
		cid    int64
		sender *wsClient
		mu     sync.Mutex
	}
	cs := make([]*conv, convs)
	var clients []*figClient
	for i := range cs {
		base := int64(i*members + 1)
		var others []int64
		for m := int64(1); m < members; m++ {
			others = append(others, base+m)
		}
		cid := w.user(t, base).create(t, fmt.Sprintf("c%d", i), others...)
		cs[i] = &conv{cid: cid}
		for m := int64(0); m < members; m++ {
			fc := startFigClient(t, w, w.user(t, base+m), &sentAt)
			clients = append(clients, fc)
			if m == 0 {
				cs[i].sender = fc.c
			}
		}
	}
	t.Logf("%d conversations of %d members, %d connections", convs, members, len(clients))

	total := *wsFigRate * *wsFigSeconds
	interval := time.Second / time.Duration(*wsFigRate)
	start := time.Now()
	var ids []string
	for k := 0; k < total; k++ {
		if d := time.Until(start.Add(time.Duration(k) * interval)); d > 0 {
			time.Sleep(d)
		}
		c := cs[k%convs]
		id := uuid.NewString()
		ids = append(ids, id)
		sentAt.Store(id, time.Now())
		c.mu.Lock()
		err := c.sender.writeJSONE(map[string]any{"type": protocol.FrameSend, "conversation_id": c.cid, "msg_id": id, "body": "figure"})
		c.mu.Unlock()
		require.NoError(t, err)
	}
	sendSecs := time.Since(start).Seconds()
	// Every receiver has every message (a generous bound only against hangs).
	waitFor(t, 5*time.Minute, "all pushes", func() bool {
		n := 0
		for _, fc := range clients {
			fc.mu.Lock()
			n += len(fc.lat)
			fc.mu.Unlock()
		}
		return n == total*(members-1)
	})
	elapsed := time.Since(start).Seconds()
	var all, acks []float64
	for _, fc := range clients {
		fc.mu.Lock()
		all = append(all, fc.lat...)
		acks = append(acks, fc.ack...)
		fc.mu.Unlock()
	}
	h := wsMetric(w.ws, "push_latency_seconds")
	var hs, hc float64
	if m, err := metricOf(h); err == nil {
		hs, hc = m.GetHistogram().GetSampleSum(), float64(m.GetHistogram().GetSampleCount())
	}
	t.Logf("FIGURE send->push latency at %.0f msg/s offered (%d messages in %.1fs, all %d pushes done after %.1fs), %d members: %s",
		float64(total)/sendSecs, total, sendSecs, total*(members-1), elapsed, members, quantiles(all))
	t.Logf("FIGURE send->send_ack (appended, projected, acknowledged): %s", quantiles(acks))
	t.Logf("FIGURE gateway push_latency_seconds (hub wake-up to frame written): mean %.2fms over %.0f frames; push queries: %.0f, mean %.1f sessions each",
		1000*hs/max(hc, 1), hc, histCount(wsMetric(w.ws, "push_batch_sessions")), histMean(wsMetric(w.ws, "push_batch_sessions")))
}

// wsFigureIdleMemory: connections that said hello and then idle. The
// clients are raw sockets (a hand-made handshake and one masked frame), so
// what grows is the server's side: its two goroutines, the gorilla
// connection, the session, the hub subscription, the timers.
func wsFigureIdleMemory(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{MaxConns: *wsFigConns + 10})
	addr := strings.TrimPrefix(w.url, "http://")
	n := *wsFigConns
	toks := make([]string, n)
	for i := range toks {
		toks[i] = mustToken(t, testSecret, int64(100000+i))
	}
	measure := func() (heap, stack uint64, goroutines int) {
		for i := 0; i < 3; i++ {
			runtime.GC()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse, ms.StackInuse, runtime.NumGoroutine()
	}
	heap0, stack0, g0 := measure()
	conns := make([]net.Conn, n)
	parallel(t, n, 16, func(i int) error {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		conns[i] = c
		req := "GET /v1/ws HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" +
			"Authorization: Bearer " + toks[i] + "\r\n\r\n"
		if _, err := c.Write([]byte(req)); err != nil {
			return err
		}
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		if res.StatusCode != http.StatusSwitchingProtocols {
			return fmt.Errorf("handshake: %s", res.Status)
		}
		_, err = c.Write(maskedText([]byte(`{"type":"hello","after":0}`)))
		return err
	})
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	})
	waitFor(t, 2*time.Minute, "every session to say welcome", func() bool {
		return counterValue(wsMetric(w.ws, "frames_written_total", protocol.FrameWelcome)) == float64(n)
	})
	time.Sleep(time.Second) // let the hellos' transient allocations go
	heap1, stack1, g1 := measure()
	per := func(a, b uint64) float64 { return float64(int64(b)-int64(a)) / float64(n) }
	t.Logf("FIGURE idle WebSocket connections: %d; per connection: heap %.1f KiB, stacks %.1f KiB, total %.1f KiB, goroutines %.2f",
		n, per(heap0, heap1)/1024, per(stack0, stack1)/1024, (per(heap0, heap1)+per(stack0, stack1))/1024, float64(g1-g0)/float64(n))
	t.Logf("FIGURE at that rate, 16384 connections (the default MaxConns, under the 20000 open files of a process) take %.0f MiB",
		16384*(per(heap0, heap1)+per(stack0, stack1))/(1<<20))
}

// maskedText is one client text frame (clients must mask).
func maskedText(p []byte) []byte {
	key := [4]byte{1, 2, 3, 4}
	out := []byte{0x81}
	switch {
	case len(p) < 126:
		out = append(out, 0x80|byte(len(p)))
	default:
		out = append(out, 0x80|126, byte(len(p)>>8), byte(len(p)))
	}
	out = append(out, key[:]...)
	for i, b := range p {
		out = append(out, b^key[i%4])
	}
	return out
}

// wsFigureBigGroup: one message to a group of -wsfigures.group members,
// all connected: from the send to the last member's push.
func wsFigureBigGroup(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	w := newWSGatewayOn(t, env, wsOpts{ws: WSConfig{}})
	n := *wsFigGroup
	var others []int64
	for i := 2; i <= n; i++ {
		others = append(others, int64(i))
	}
	owner := w.user(t, 1)
	cid := owner.create(t, "big", others...)
	var sentAt sync.Map
	clients := make([]*figClient, n)
	parallel(t, n, 16, func(i int) error {
		clients[i] = startFigClient(t, w, w.user(t, int64(i+1)), &sentAt)
		return nil
	})
	waitFor(t, time.Minute, "welcomes", func() bool {
		return counterValue(wsMetric(w.ws, "frames_written_total", protocol.FrameWelcome)) == float64(n)
	})
	var lastAll, projected []float64
	for run := 0; run < *wsFigGroupRuns; run++ {
		id := uuid.NewString()
		t0 := time.Now()
		sentAt.Store(id, t0)
		r := owner.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid), map[string]any{"msg_id": id, "body": "to all"})
		require.Equal(t, http.StatusCreated, r.status, "%s", r)
		projected = append(projected, float64(time.Since(t0).Microseconds())/1000)
		var last time.Time
		waitFor(t, time.Minute, "every member's push", func() bool {
			for _, fc := range clients {
				fc.mu.Lock()
				at, ok := fc.seen[id]
				fc.mu.Unlock()
				if !ok {
					return false
				}
				if at.After(last) {
					last = at
				}
			}
			return true
		})
		lastAll = append(lastAll, float64(last.Sub(t0).Microseconds())/1000)
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("FIGURE one message to all %d members, %d runs: sender's 201 (projected) %s; last member's push %s; push queries %.0f (mean %.0f sessions each)",
		n, len(lastAll), quantiles(projected), quantiles(lastAll), histCount(wsMetric(w.ws, "push_batch_sessions")), histMean(wsMetric(w.ws, "push_batch_sessions")))
}

// histogram helpers for the figures

func metricOf(c interface{ Write(*dtoMetric) error }) (*dtoMetric, error) {
	var m dtoMetric
	return &m, c.Write(&m)
}

func histCount(h interface{ Write(*dtoMetric) error }) float64 {
	m, err := metricOf(h)
	if err != nil {
		return 0
	}
	return float64(m.GetHistogram().GetSampleCount())
}

func histMean(h interface{ Write(*dtoMetric) error }) float64 {
	m, err := metricOf(h)
	if err != nil || m.GetHistogram().GetSampleCount() == 0 {
		return 0
	}
	return m.GetHistogram().GetSampleSum() / float64(m.GetHistogram().GetSampleCount())
}

type dtoMetric = dto.Metric
