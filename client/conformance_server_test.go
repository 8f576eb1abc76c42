package client_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// scriptServer is the fake gateway of a conformance scenario: every
// request takes the first step of the script that matches it and still has
// answers left; a request no step takes is held until the scenario ends.
// It logs every request, in arrival order.
type scriptServer struct {
	t     testing.TB
	steps []step
	srv   *httptest.Server
	done  chan struct{} // closed when the scenario ends: held requests return

	mu        sync.Mutex
	used      []int                // answers given, by step
	log       []loggedRequest      // every request, in arrival order
	notBefore map[string]time.Time // by path: the Retry-After (or retry_after_ms) of the last answer
	conns     []*websocket.Conn
}

// loggedRequest is one request as the fake server saw it. Body is the JSON
// body (for /v1/ws: the hello frame).
type loggedRequest struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Query   map[string]string `json:"query,omitempty"`
	Headers map[string]string `json:"headers,omitempty"` // only those in loggedHeaders
	Body    json.RawMessage   `json:"body,omitempty"`
	Step    int               `json:"step"` // index of the step that answered it; -1: held (beyond the script)
	Early   bool              `json:"early,omitempty"`
}

func newScriptServer(t testing.TB, steps []step) *scriptServer {
	t.Helper()
	s := &scriptServer{t: t, steps: steps, used: make([]int, len(steps)), done: make(chan struct{}),
		notBefore: map[string]time.Time{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.close)
	return s
}

// close ends held requests and WebSocket connections, then the server.
func (s *scriptServer) close() {
	s.mu.Lock()
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	conns := s.conns
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	s.srv.Close()
}

// consumed reports whether every step got at least its minimum of requests.
func (s *scriptServer) consumed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, st := range s.steps {
		if s.used[i] < st.min() {
			return false
		}
	}
	return true
}

func (s *scriptServer) requests() []loggedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]loggedRequest(nil), s.log...)
}

func (s *scriptServer) serve(w http.ResponseWriter, r *http.Request) {
	lr := loggedRequest{Method: r.Method, Path: r.URL.Path, Query: map[string]string{}, Step: -1}
	for k, v := range r.URL.Query() {
		lr.Query[k] = v[0]
	}
	for _, h := range loggedHeaders {
		if v := r.Header.Get(h); v != "" {
			lr.Headers = map[string]string{h: v}
		}
	}
	if r.Body != nil {
		raw, _ := io.ReadAll(r.Body)
		if len(bytes.TrimSpace(raw)) > 0 {
			lr.Body = raw
		}
	}
	s.mu.Lock()
	// A request before the time the last answer on its path asked for is
	// answered that answer again: the runner fails on it.
	if nb, ok := s.notBefore[lr.Path]; ok && time.Now().Before(nb) {
		lr.Early = true
	}
	idx := -1
	for i, st := range s.steps {
		if s.used[i] < st.max() && st.Match.matches(lr) {
			idx = i
			break
		}
	}
	if idx >= 0 {
		s.used[idx]++
		lr.Step = idx
	}
	s.mu.Unlock()

	if idx < 0 {
		s.record(lr)
		s.hold(w, r)
		return
	}
	st := s.steps[idx]
	if st.AfterStep != nil && !s.waitForStep(r, *st.AfterStep) {
		s.record(lr)
		return
	}
	if st.WS != nil {
		s.serveWS(w, r, lr, st.WS)
		return
	}
	s.record(lr)
	if st.Respond == nil {
		s.hold(w, r)
		return
	}
	s.answer(w, lr.Path, st.Respond)
}

// waitForStep waits until step i answered a request (false: the scenario
// or the request ended first).
func (s *scriptServer) waitForStep(r *http.Request, i int) bool {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		ok := i >= 0 && i < len(s.used) && s.used[i] > 0
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-s.done:
			return false
		case <-r.Context().Done():
			return false
		case <-tick.C:
		}
	}
}

func (s *scriptServer) record(lr loggedRequest) {
	s.mu.Lock()
	s.log = append(s.log, lr)
	s.mu.Unlock()
}

// hold answers nothing until the scenario ends (a long-poll that never
// answers, an unscripted request).
func (s *scriptServer) hold(w http.ResponseWriter, r *http.Request) {
	select {
	case <-s.done:
	case <-r.Context().Done():
	}
	w.WriteHeader(http.StatusServiceUnavailable)
}

func (s *scriptServer) answer(w http.ResponseWriter, path string, a *httpAnswer) {
	for k, v := range a.Headers {
		w.Header().Set(k, v)
	}
	if ra := w.Header().Get("Retry-After"); ra != "" {
		if secs, err := strconv.Atoi(ra); err == nil {
			s.mu.Lock()
			s.notBefore[path] = time.Now().Add(time.Duration(secs) * time.Second)
			s.mu.Unlock()
		}
	}
	// An error body's retry_after_ms is the precise form of Retry-After
	// (docs/protocol.md, "Reconnect hints"): it wins.
	var eb struct {
		Error struct {
			RetryAfterMS int64 `json:"retry_after_ms"`
		} `json:"error"`
	}
	if json.Unmarshal(a.Body, &eb) == nil && eb.Error.RetryAfterMS > 0 {
		s.mu.Lock()
		s.notBefore[path] = time.Now().Add(time.Duration(eb.Error.RetryAfterMS) * time.Millisecond)
		s.mu.Unlock()
	}
	status := a.Status
	if status == 0 {
		status = http.StatusOK
	}
	if len(a.Body) > 0 {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_, _ = w.Write(a.Body)
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// serveWS upgrades, reads the hello (logged as the request's body), sends
// the step's frames, then closes with the step's code or keeps the
// connection open, silent, until the scenario ends.
func (s *scriptServer) serveWS(w http.ResponseWriter, r *http.Request, lr loggedRequest, ws *wsScript) {
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		s.record(lr)
		return
	}
	s.mu.Lock()
	s.conns = append(s.conns, conn)
	s.mu.Unlock()
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, hello, err := conn.ReadMessage()
	if err == nil {
		lr.Body = hello
	}
	s.record(lr)
	if err != nil {
		return
	}
	var retryAfterMS int64
	for _, f := range ws.Frames {
		var probe struct {
			Type         string `json:"type"`
			RetryAfterMS int64  `json:"retry_after_ms"`
		}
		_ = json.Unmarshal(f, &probe)
		if probe.Type == "error" && probe.RetryAfterMS > 0 {
			retryAfterMS = probe.RetryAfterMS
		}
		if err := conn.WriteMessage(websocket.TextMessage, f); err != nil {
			return
		}
	}
	if ws.Close != nil {
		if retryAfterMS > 0 {
			s.mu.Lock()
			s.notBefore[lr.Path] = time.Now().Add(time.Duration(retryAfterMS) * time.Millisecond)
			s.mu.Unlock()
		}
		msg := websocket.FormatCloseMessage(ws.Close.Code, ws.Close.Reason)
		_ = conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
		// Wait for the client's close (or a second) so it reads the code.
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}
	// Open: log the client's frames (pings aside) and answer those a reply
	// matches, until the scenario ends.
	_ = conn.SetReadDeadline(time.Time{})
	go func() {
		<-s.done
		_ = conn.Close()
	}()
	used := make([]int, len(ws.Replies))
	for {
		_, raw, err := conn.ReadMessage()
		if err != nil {
			return
		}
		var probe struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(raw, &probe) != nil || probe.Type == "ping" {
			continue
		}
		s.record(loggedRequest{Method: "WS", Path: lr.Path, Body: raw, Step: lr.Step})
		for i, rep := range ws.Replies {
			if used[i] >= max(rep.Times, 1) || !(matcher{Path: lr.Path, Body: rep.Match}).matches(loggedRequest{Path: lr.Path, Body: raw}) {
				continue
			}
			used[i]++
			for _, f := range rep.Frames {
				if err := conn.WriteMessage(websocket.TextMessage, f); err != nil {
					return
				}
			}
			break
		}
	}
}

// loggedHeaders are the request headers a scenario can match.
var loggedHeaders = []string{"If-None-Match"}

// matches reports whether lr satisfies m: the same method and path, each
// query parameter of m with the same value ("*": present, "-": absent),
// each header of m with the same value, and m's body a subset of lr's.
func (m matcher) matches(lr loggedRequest) bool {
	if m.Method != "" && m.Method != lr.Method || m.Path != lr.Path {
		return false
	}
	for k, v := range m.Query {
		got, ok := lr.Query[k]
		if v == "-" && ok || v != "-" && (!ok || v != "*" && v != got) {
			return false
		}
	}
	for k, v := range m.Headers {
		if lr.Headers[http.CanonicalHeaderKey(k)] != v {
			return false
		}
	}
	if len(m.Body) == 0 {
		return true
	}
	var want, got any
	if json.Unmarshal(m.Body, &want) != nil || json.Unmarshal(lr.Body, &got) != nil {
		return false
	}
	return subset(want, got)
}

// subset reports whether every field of want is in got with the same
// value (recursively for objects; arrays and scalars are compared whole).
func subset(want, got any) bool {
	wm, ok := want.(map[string]any)
	if !ok {
		return fmt.Sprint(want) == fmt.Sprint(got)
	}
	gm, ok := got.(map[string]any)
	if !ok {
		return false
	}
	for k, v := range wm {
		g, ok := gm[k]
		if !ok || !subset(v, g) {
			return false
		}
	}
	return true
}

// TestConformanceMatcher pins the matching rules the README states, which
// every runner must share.
func TestConformanceMatcher(t *testing.T) {
	lr := loggedRequest{Method: "GET", Path: "/v1/sync", Query: map[string]string{"after": "3", "limit": "200"},
		Headers: map[string]string{"If-None-Match": `"h1"`}, Body: json.RawMessage(`{"type":"hello","after":3,"epoch":{"n":1}}`)}
	for _, tc := range []struct {
		m    matcher
		want bool
	}{
		{matcher{Path: "/v1/sync"}, true},
		{matcher{Method: "POST", Path: "/v1/sync"}, false},
		{matcher{Path: "/v1/ws"}, false},
		{matcher{Path: "/v1/sync", Query: map[string]string{"after": "3"}}, true},
		{matcher{Path: "/v1/sync", Query: map[string]string{"after": "4"}}, false},
		{matcher{Path: "/v1/sync", Query: map[string]string{"after": "*"}}, true},
		{matcher{Path: "/v1/sync", Query: map[string]string{"wait": "*"}}, false},
		{matcher{Path: "/v1/sync", Query: map[string]string{"wait": "-"}}, true},
		{matcher{Path: "/v1/sync", Query: map[string]string{"after": "-"}}, false},
		{matcher{Path: "/v1/sync", Headers: map[string]string{"if-none-match": `"h1"`}}, true},
		{matcher{Path: "/v1/sync", Headers: map[string]string{"If-None-Match": `"h2"`}}, false},
		{matcher{Path: "/v1/sync", Body: json.RawMessage(`{"after":3}`)}, true},
		{matcher{Path: "/v1/sync", Body: json.RawMessage(`{"epoch":{"n":1}}`)}, true},
		{matcher{Path: "/v1/sync", Body: json.RawMessage(`{"after":2}`)}, false},
		{matcher{Path: "/v1/sync", Body: json.RawMessage(`{"missing":1}`)}, false},
	} {
		if got := tc.m.matches(lr); got != tc.want {
			t.Errorf("%+v matches = %v, want %v", tc.m, got, tc.want)
		}
	}
}
