package client_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// faults are what a faultProxy does to the traffic; a test changes them at
// any time through set. The zero value passes everything.
type faults struct {
	// HTTP requests
	StatusP    float64 // answer 429 or 503 with Retry-After instead of forwarding
	RetryAfter int     // seconds of that Retry-After (default 1)
	DropReqP   float64 // close the connection without forwarding
	DropRespP  float64 // forward, then close without answering: the server acted, the client does not know
	CutRespP   float64 // forward, then write the head and half the body and close
	Delay      time.Duration
	// ForceStatus answers requests whose path starts with ForcePath with
	// this status and error code (a permanent refusal, say).
	ForceStatus int
	ForceCode   string
	ForcePath   string
	// WebSocket
	WSCloseAfterWelcome int     // close every connection with this code after its welcome
	RefuseWS            int     // answer upgrades with this status (404: no WebSocket here, 503: overloaded)
	WSDropP             float64 // drop a server frame of entries (a gap in the stream)
	WSDupP              float64 // write a server frame twice
	WSCloseP            float64 // after a server frame, close with 1012, 1001, 4008 or 4029 (with retry_after_ms)
	WSKillP             float64 // after a server frame, drop the TCP connection without a close
	WSLoseAckP          float64 // drop the connection instead of passing a send_ack: the send happened, the client does not know
	WSRetryMS           int64   // retry_after_ms of the 4029 (default 200)
	WSDelayMax          time.Duration
}

// faultProxy is an HTTP server between clients and the gateway that
// understands HTTP and WebSocket, so that it can fail in the ways the
// network and overloaded servers do: refusals with Retry-After, lost
// requests and answers, answers cut mid-body, delays, and on WebSocket
// connections dropped, duplicated or delayed frames, close codes and
// dropped connections.
type faultProxy struct {
	t        testing.TB
	upstream string // http://host:port
	srv      *http.Server
	url      string
	hc       *http.Client
	up       websocket.Upgrader

	mu    sync.Mutex
	f     faults
	rnd   *rand.Rand
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup

	stats struct {
		status, dropReq, dropResp, cutResp, wsDrop, wsDup, wsClose, wsKill, wsRefused, wsLostAck atomic.Int64
	}
}

func newFaultProxy(t testing.TB, upstream string, seed uint64) *faultProxy {
	t.Helper()
	p := &faultProxy{t: t, upstream: upstream, rnd: rand.New(rand.NewPCG(seed, seed+1)), conns: map[net.Conn]struct{}{},
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.url = "http://" + ln.Addr().String()
	p.srv = &http.Server{Handler: p, ConnState: func(c net.Conn, s http.ConnState) {
		p.mu.Lock()
		defer p.mu.Unlock()
		switch s {
		case http.StateNew:
			p.conns[c] = struct{}{}
		case http.StateClosed:
			delete(p.conns, c)
		}
	}}
	p.wg.Add(1)
	go func() { defer p.wg.Done(); _ = p.srv.Serve(ln) }()
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) close() {
	_ = p.srv.Close()
	p.killAll()
	p.wg.Wait()
	p.hc.CloseIdleConnections()
}

// set replaces the faults.
func (p *faultProxy) set(f faults) {
	p.mu.Lock()
	p.f = f
	p.mu.Unlock()
}

// killAll drops every connection through the proxy at once.
func (p *faultProxy) killAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *faultProxy) roll(prob float64) bool {
	if prob <= 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rnd.Float64() < prob
}

func (p *faultProxy) faults() faults {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.f
}

func (p *faultProxy) randDur(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Duration(p.rnd.Int64N(int64(d)))
}

func (p *faultProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

func (p *faultProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// hangUp closes the client's connection without an answer.
func hangUp(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			_ = c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.wg.Add(1)
	defer p.wg.Done()
	f := p.faults()
	if websocket.IsWebSocketUpgrade(r) {
		p.serveWS(w, r, f)
		return
	}
	time.Sleep(p.randDur(f.Delay))
	if f.ForceStatus != 0 && strings.HasPrefix(r.URL.Path, f.ForcePath) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.ForceStatus)
		fmt.Fprintf(w, `{"error":{"code":%q,"message":"forced by the test proxy","retryable":false}}`, f.ForceCode)
		return
	}
	if p.roll(f.StatusP) {
		p.stats.status.Add(1)
		status, code := http.StatusServiceUnavailable, protocol.CodeUnavailable
		if p.roll(0.5) {
			status, code = http.StatusTooManyRequests, protocol.CodeRateLimited
		}
		ra := f.RetryAfter
		if ra == 0 {
			ra = 1
		}
		w.Header().Set("Retry-After", strconv.Itoa(ra))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"code":%q,"message":"injected by the test proxy","retryable":true}}`, code)
		return
	}
	if p.roll(f.DropReqP) {
		p.stats.dropReq.Add(1)
		hangUp(w)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.upstream+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	req.ContentLength = r.ContentLength
	res, err := p.hc.Do(req)
	if err != nil {
		hangUp(w)
		return
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		hangUp(w)
		return
	}
	if p.roll(f.DropRespP) {
		p.stats.dropResp.Add(1)
		hangUp(w)
		return
	}
	if p.roll(f.CutRespP) && len(body) > 1 {
		p.stats.cutResp.Add(1)
		hj, ok := w.(http.Hijacker)
		if !ok {
			panic(http.ErrAbortHandler)
		}
		c, bw, err := hj.Hijack()
		if err != nil {
			return
		}
		fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\n", res.StatusCode, http.StatusText(res.StatusCode))
		res.Header.Set("Content-Length", strconv.Itoa(len(body)))
		_ = res.Header.Write(bw)
		_, _ = bw.WriteString("\r\n")
		_, _ = bw.Write(body[:len(body)/2])
		_ = bw.Flush()
		_ = c.Close()
		return
	}
	for k, vs := range res.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(res.StatusCode)
	_, _ = w.Write(body)
}

var closeCodes = []int{websocket.CloseServiceRestart, websocket.CloseGoingAway, 4008, 4029}

func (p *faultProxy) serveWS(w http.ResponseWriter, r *http.Request, f faults) {
	if f.RefuseWS != 0 {
		p.stats.wsRefused.Add(1)
		if f.RefuseWS == http.StatusServiceUnavailable || f.RefuseWS == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.RefuseWS)
		fmt.Fprintf(w, `{"error":{"code":"unavailable","message":"WebSocket refused by the test proxy","retryable":true}}`)
		return
	}
	hdr := http.Header{}
	if a := r.Header.Get("Authorization"); a != "" {
		hdr.Set("Authorization", a)
	}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	upURL := "ws" + strings.TrimPrefix(p.upstream, "http") + r.URL.RequestURI()
	sc, res, err := d.DialContext(r.Context(), upURL, hdr)
	if err != nil {
		if res != nil {
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			for k, vs := range res.Header {
				w.Header()[k] = vs
			}
			w.WriteHeader(res.StatusCode)
			_, _ = w.Write(body)
			return
		}
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	cc, err := p.up.Upgrade(w, r, nil)
	if err != nil {
		_ = sc.Close()
		return
	}
	p.track(sc.NetConn())
	p.track(cc.NetConn())
	defer func() {
		_ = sc.Close()
		_ = cc.Close()
		p.untrack(sc.NetConn())
		p.untrack(cc.NetConn())
	}()
	// Client to server: a plain relay.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			mt, b, err := cc.ReadMessage()
			if err != nil {
				_ = sc.Close()
				return
			}
			if sc.WriteMessage(mt, b) != nil {
				_ = cc.Close()
				return
			}
		}
	}()
	// Server to client, with the faults.
	for {
		mt, b, err := sc.ReadMessage()
		if err != nil {
			if ce, ok := err.(*websocket.CloseError); ok {
				_ = cc.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(ce.Code, ce.Text), time.Now().Add(time.Second))
			}
			_ = cc.Close()
			break
		}
		f := p.faults()
		time.Sleep(p.randDur(f.WSDelayMax))
		var head protocol.ServerFrame
		_ = json.Unmarshal(b, &head)
		if head.Type == protocol.FrameSendAck && p.roll(f.WSLoseAckP) {
			p.stats.wsLostAck.Add(1)
			break
		}
		if head.Type == protocol.FrameEntries && p.roll(f.WSDropP) {
			p.stats.wsDrop.Add(1)
			continue
		}
		if cc.WriteMessage(mt, b) != nil {
			break
		}
		if head.Type == protocol.FrameWelcome && f.WSCloseAfterWelcome != 0 {
			_ = cc.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(f.WSCloseAfterWelcome, "forced"), time.Now().Add(time.Second))
			break
		}
		if head.Type == protocol.FrameEntries && p.roll(f.WSDupP) {
			p.stats.wsDup.Add(1)
			_ = cc.WriteMessage(mt, b)
		}
		if p.roll(f.WSKillP) {
			p.stats.wsKill.Add(1)
			break
		}
		if p.roll(f.WSCloseP) {
			p.stats.wsClose.Add(1)
			p.mu.Lock()
			code := closeCodes[p.rnd.IntN(len(closeCodes))]
			p.mu.Unlock()
			if code == 4029 {
				ms := f.WSRetryMS
				if ms == 0 {
					ms = 200
				}
				_ = cc.WriteMessage(websocket.TextMessage,
					[]byte(fmt.Sprintf(`{"type":"error","code":"rate_limited","message":"injected","retryable":true,"retry_after_ms":%d}`, ms)))
			}
			_ = cc.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, "injected"), time.Now().Add(time.Second))
			break
		}
	}
	_ = cc.Close()
	_ = sc.Close()
	<-done
}

func (p *faultProxy) String() string {
	s := &p.stats
	return fmt.Sprintf("status=%d dropReq=%d dropResp=%d cutResp=%d wsDrop=%d wsDup=%d wsClose=%d wsKill=%d wsRefused=%d wsLostAck=%d",
		s.status.Load(), s.dropReq.Load(), s.dropResp.Load(), s.cutResp.Load(), s.wsDrop.Load(), s.wsDup.Load(),
		s.wsClose.Load(), s.wsKill.Load(), s.wsRefused.Load(), s.wsLostAck.Load())
}

// tcpProxy relays TCP connections to the gateway and cuts them: each
// connection is, with probability CutP, cut after a random number of bytes
// from the server (mid-answer, mid-frame); Latency delays every chunk; and
// killAll drops every connection at once.
type tcpProxy struct {
	upstream string
	ln       net.Listener
	url      string

	mu     sync.Mutex
	rnd    *rand.Rand
	cutP   float64
	cutMax int
	lat    time.Duration
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
	cuts   atomic.Int64
	closed bool
	down   bool // accepted connections are closed at once
}

// setDown makes the proxy refuse (accept and close) every connection, as a
// server that is down behind a load balancer does, or pass them again.
func (p *tcpProxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
	if down {
		p.killAll()
	}
}

func newTCPProxy(t testing.TB, upstreamURL string, seed uint64) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{upstream: strings.TrimPrefix(upstreamURL, "http://"), ln: ln, url: "http://" + ln.Addr().String(),
		rnd: rand.New(rand.NewPCG(seed, seed+7)), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// set changes the faults: cut probability, the largest cut offset, latency.
func (p *tcpProxy) set(cutP float64, cutMax int, latency time.Duration) {
	p.mu.Lock()
	p.cutP, p.cutMax, p.lat = cutP, cutMax, latency
	p.mu.Unlock()
}

func (p *tcpProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.killAll()
	p.wg.Wait()
}

func (p *tcpProxy) killAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *tcpProxy) serve(c net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	down := p.down
	p.mu.Unlock()
	if down {
		_ = c.Close()
		return
	}
	s, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = c.Close()
		_ = s.Close()
		return
	}
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	limit := -1
	if p.cutP > 0 && p.rnd.Float64() < p.cutP && p.cutMax > 0 {
		limit = 1 + p.rnd.IntN(p.cutMax)
	}
	lat := p.lat
	p.mu.Unlock()
	defer func() {
		_ = c.Close()
		_ = s.Close()
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.conns, s)
		p.mu.Unlock()
	}()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(s, c)
		_ = s.Close()
	}()
	// Server to client, cut after limit bytes.
	buf := make([]byte, 4096)
	sent := 0
	for {
		n, err := s.Read(buf)
		if n > 0 {
			if lat > 0 {
				time.Sleep(lat)
			}
			chunk := buf[:n]
			if limit >= 0 && sent+n >= limit {
				_, _ = c.Write(chunk[:limit-sent])
				p.cuts.Add(1)
				break
			}
			if _, werr := c.Write(chunk); werr != nil {
				break
			}
			sent += n
		}
		if err != nil {
			break
		}
	}
	_ = c.Close()
	wg.Wait()
}
