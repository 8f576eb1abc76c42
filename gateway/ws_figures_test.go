package gateway

import (
	"bufio"
	"encoding/json"
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

// The WebSocket figures of docs/websocket.md, as benchmarks: each
// iteration is one whole measurement, its figures reported as metrics
// (docs/benchmarks.md has the command of each). They run the whole
// pipeline in one process (kfake, fanout, the gateway and every client;
// PostgreSQL started by the tests), so the machine's cores are shared by
// all of it: read them as upper bounds.

// reportQuantiles reports p50, p90, p99 and the max of ms (milliseconds)
// as name-p50-ms and so on.
func reportQuantiles(b *testing.B, name string, ms []float64) {
	if len(ms) == 0 {
		return
	}
	slices.Sort(ms)
	q := func(p float64) float64 { return ms[min(len(ms)-1, int(p*float64(len(ms))))] }
	b.ReportMetric(q(.5), name+"-p50-ms")
	b.ReportMetric(q(.9), name+"-p90-ms")
	b.ReportMetric(q(.99), name+"-p99-ms")
	b.ReportMetric(ms[len(ms)-1], name+"-max-ms")
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
			fc.frame(raw, time.Now(), u.id, sentAt)
		}
	}()
	t.Cleanup(func() {
		_ = c.conn.Close()
		<-fc.done
	})
	return fc
}

// frame records what one frame read at now says.
func (fc *figClient) frame(raw []byte, now time.Time, self int64, sentAt *sync.Map) {
	var f protocol.ServerFrame
	if json.Unmarshal(raw, &f) != nil {
		return
	}
	since := func(v any) float64 { return float64(now.Sub(v.(time.Time)).Microseconds()) / 1000 }
	fc.mu.Lock()
	defer fc.mu.Unlock()
	switch f.Type {
	case protocol.FrameSendAck:
		if v, ok := sentAt.Load(f.MsgID); ok {
			fc.ack = append(fc.ack, since(v))
		}
	case protocol.FrameEntries:
		for _, e := range f.Entries {
			if e.Message == nil {
				continue
			}
			fc.seen[e.Message.MsgID] = now
			if v, ok := sentAt.Load(e.Message.MsgID); ok && e.Message.SenderID != self {
				fc.lat = append(fc.lat, since(v))
			}
		}
	}
}

// BenchmarkWSPushLatency: conversations of 7 members; one member of each
// sends over its socket, all together at the sub-benchmark's rate for
// 10 s; the other six measure send (frame written) to push (frame read).
func BenchmarkWSPushLatency(b *testing.B) {
	for _, rate := range []int{300, 1000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			var lat, acks []float64
			for range b.N {
				l, a := wsPushLatency(b, rate, 10*time.Second)
				lat, acks = append(lat, l...), append(acks, a...)
			}
			b.ReportMetric(0, "ns/op")
			reportQuantiles(b, "push", lat)
			reportQuantiles(b, "ack", acks)
		})
	}
}

// wsPushLatency runs one measurement and returns its send -> push and
// send -> send_ack latencies (ms).
func wsPushLatency(b *testing.B, rate int, d time.Duration) (lat, acks []float64) {
	w := newWSGateway(b, nil, WSConfig{})
	const members = 7
	convs := max(10, rate/25) // about 25 messages/s per conversation
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
		cid := w.user(b, base).create(b, fmt.Sprintf("c%d", i), others...)
		cs[i] = &conv{cid: cid}
		for m := int64(0); m < members; m++ {
			fc := startFigClient(b, w, w.user(b, base+m), &sentAt)
			clients = append(clients, fc)
			if m == 0 {
				cs[i].sender = fc.c
			}
		}
	}
	b.Logf("%d conversations of %d members, %d connections", convs, members, len(clients))
	total := rate * int(d/time.Second)
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for k := 0; k < total; k++ {
		if d := time.Until(start.Add(time.Duration(k) * interval)); d > 0 {
			time.Sleep(d)
		}
		c := cs[k%convs]
		id := uuid.NewString()
		sentAt.Store(id, time.Now())
		c.mu.Lock()
		err := c.sender.writeJSONE(map[string]any{"type": protocol.FrameSend, "conversation_id": c.cid, "msg_id": id, "body": "figure"})
		c.mu.Unlock()
		require.NoError(b, err)
	}
	sendSecs := time.Since(start).Seconds()
	// Every receiver has every message (a generous bound only against hangs).
	defer func() {
		b.Logf("%d messages in %.1fs, all %d pushes done after %.1fs", total, sendSecs, total*(members-1), time.Since(start).Seconds())
	}()
	waitFor(b, 5*time.Minute, "all pushes", func() bool {
		n := 0
		for _, fc := range clients {
			fc.mu.Lock()
			n += len(fc.lat)
			fc.mu.Unlock()
		}
		return n == total*(members-1)
	})
	for _, fc := range clients {
		fc.mu.Lock()
		lat = append(lat, fc.lat...)
		acks = append(acks, fc.ack...)
		fc.mu.Unlock()
	}
	var hs, hc float64
	if m, err := metricOf(wsMetric(w.ws, "push_latency_seconds")); err == nil {
		hs, hc = m.GetHistogram().GetSampleSum(), float64(m.GetHistogram().GetSampleCount())
	}
	b.ReportMetric(float64(total)/sendSecs, "offered-msg/s")
	// The gateway's own push_latency_seconds: hub wake-up to frame written.
	b.ReportMetric(1000*hs/max(hc, 1), "gateway-push-mean-ms")
	b.ReportMetric(histCount(wsMetric(w.ws, "push_batch_sessions"))/sendSecs, "push-queries/s")
	b.ReportMetric(histMean(wsMetric(w.ws, "push_batch_sessions")), "sessions/push-query")
	return lat, acks
}

// BenchmarkWSIdleConnection: 2,000 connections that said hello and then
// idle. The clients are raw sockets (a hand-made handshake and one masked
// frame), so what grows is the server's side: its two goroutines, the
// gorilla connection, the session, the hub subscription, the timers.
func BenchmarkWSIdleConnection(b *testing.B) {
	const n = 2000 // each costs two file descriptors here: client and server
	var heap, stack, goroutines float64
	for range b.N {
		h, s, g := wsIdleMemory(b, n)
		heap, stack, goroutines = heap+h/float64(b.N), stack+s/float64(b.N), goroutines+g/float64(b.N)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(heap/1024, "heap-KiB/conn")
	b.ReportMetric(stack/1024, "stack-KiB/conn")
	b.ReportMetric((heap+stack)/1024, "KiB/conn")
	b.ReportMetric(goroutines, "goroutines/conn")
	// At that rate, the default MaxConns (under the 20,000 open files of
	// a process).
	b.ReportMetric(16384*(heap+stack)/(1<<20), "MiB/16384-conns")
}

// wsIdleMemory opens n idle connections and returns what each costs the
// server: heap and stack bytes, goroutines.
func wsIdleMemory(b *testing.B, n int) (heap, stack, goroutines float64) {
	w := newWSGateway(b, nil, WSConfig{MaxConns: n + 10})
	addr := strings.TrimPrefix(w.url, "http://")
	toks := make([]string, n)
	for i := range toks {
		toks[i] = mustToken(b, testSecret, int64(100000+i))
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
	b.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	})
	parallel(b, n, 16, func(i int) error {
		c, err := rawHello(addr, toks[i])
		conns[i] = c
		return err
	})
	waitFor(b, 2*time.Minute, "every session to say welcome", func() bool {
		return counterValue(wsMetric(w.ws, "frames_written_total", protocol.FrameWelcome)) == float64(n)
	})
	time.Sleep(time.Second) // let the hellos' transient allocations go
	heap1, stack1, g1 := measure()
	per := func(a, b uint64) float64 { return float64(int64(b)-int64(a)) / float64(n) }
	return per(heap0, heap1), per(stack0, stack1), float64(g1-g0) / float64(n)
}

// rawHello opens a WebSocket with a hand-made handshake and writes the
// hello; the connection is returned even when the handshake fails, to be
// closed.
func rawHello(addr, tok string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	req := "GET /v1/ws HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" +
		"Authorization: Bearer " + tok + "\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		return c, err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return c, err
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		return c, fmt.Errorf("handshake: %s", res.Status)
	}
	_, err = c.Write(maskedText([]byte(`{"type":"hello","after":0}`)))
	return c, err
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

// BenchmarkWSBigGroup: one message to a group of 500 members, all
// connected: from the send to the last member's push, 5 messages an
// iteration.
func BenchmarkWSBigGroup(b *testing.B) {
	var lastAll, projected []float64
	for range b.N {
		l, p := wsBigGroup(b, 500, 5)
		lastAll, projected = append(lastAll, l...), append(projected, p...)
	}
	b.ReportMetric(0, "ns/op")
	reportQuantiles(b, "last-push", lastAll)
	reportQuantiles(b, "created", projected) // the sender's 201: projected
}

// wsBigGroup sends runs messages to a group of n members and returns, per
// message, the time to the last member's push and to the sender's 201.
func wsBigGroup(b *testing.B, n, runs int) (lastAll, projected []float64) {
	env := testenv.New(b, testenv.Options{})
	env.StartFanout(b)
	w := newWSGatewayOn(b, env, wsOpts{ws: WSConfig{}})
	var others []int64
	for i := 2; i <= n; i++ {
		others = append(others, int64(i))
	}
	owner := w.user(b, 1)
	cid := owner.create(b, "big", others...)
	var sentAt sync.Map
	clients := make([]*figClient, n)
	parallel(b, n, 16, func(i int) error {
		clients[i] = startFigClient(b, w, w.user(b, int64(i+1)), &sentAt)
		return nil
	})
	waitFor(b, time.Minute, "welcomes", func() bool {
		return counterValue(wsMetric(w.ws, "frames_written_total", protocol.FrameWelcome)) == float64(n)
	})
	for run := 0; run < runs; run++ {
		id := uuid.NewString()
		t0 := time.Now()
		sentAt.Store(id, t0)
		r := owner.do(b, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid), map[string]any{"msg_id": id, "body": "to all"})
		require.Equal(b, http.StatusCreated, r.status, "%s", r)
		projected = append(projected, float64(time.Since(t0).Microseconds())/1000)
		var last time.Time
		waitFor(b, time.Minute, "every member's push", func() bool {
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
	b.ReportMetric(histCount(wsMetric(w.ws, "push_batch_sessions"))/float64(runs), "push-queries/msg")
	b.ReportMetric(histMean(wsMetric(w.ws, "push_batch_sessions")), "sessions/push-query")
	return lastAll, projected
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
