package client_test

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/binary"
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
// body (for /v1/ws: the hello frame); a body that is not JSON (a sealed
// file) is logged as its size.
type loggedRequest struct {
	Method   string            `json:"method"`
	Path     string            `json:"path"`
	Query    map[string]string `json:"query,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"` // only those in loggedHeaders
	Body     json.RawMessage   `json:"body,omitempty"`
	BodySize int               `json:"body_size,omitempty"`
	Step     int               `json:"step"` // index of the step that answered it; -1: held (beyond the script)
	Early    bool              `json:"early,omitempty"`
	// BadBody says why the body is not the sealed bytes the step's
	// sealed asks for; empty when it is (or the step asks nothing).
	BadBody string `json:"bad_body,omitempty"`
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
			if lr.Headers == nil {
				lr.Headers = map[string]string{}
			}
			lr.Headers[h] = v
		}
	}
	var raw []byte
	if r.Body != nil {
		raw, _ = io.ReadAll(r.Body)
		switch {
		case json.Valid(raw):
			lr.Body = raw
		case len(raw) > 0:
			lr.BodySize = len(raw)
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
	if st.Sealed != nil {
		lr.BadBody = checkSealed(raw, st.Sealed)
	}
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
	s.answer(w, lr, st.Respond)
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

// answer writes a. In its body, {{base}} is the server's URL (the store's
// URLs in upload answers) and {{msg_id}} the msg_id of the request's body
// (the answer to a send the app made, whose msg_id the SDK chose).
func (s *scriptServer) answer(w http.ResponseWriter, lr loggedRequest, a *httpAnswer) {
	path := lr.Path
	body := bytes.ReplaceAll(a.Body, []byte("{{base}}"), []byte(s.srv.URL))
	var req struct {
		MsgID string `json:"msg_id"`
	}
	if json.Unmarshal(lr.Body, &req) == nil && req.MsgID != "" {
		body = bytes.ReplaceAll(body, []byte("{{msg_id}}"), []byte(req.MsgID))
	}
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
	if len(body) > 0 {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// checkSealed says why body is not the conformance file (or its part)
// that want describes, sealed with want's key; "" when it is. It opens
// the chunks as docs/protocol.md ("Attachments") states the format, not
// with protocol/sealed: the scenarios check the SDKs against the
// document.
func checkSealed(body []byte, want *sealedBody) string {
	const chunk, tag = 64 << 10, 16
	key, err := base64.RawURLEncoding.DecodeString(want.Key)
	if err != nil {
		return "the scenario's key: " + err.Error()
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return "the scenario's key: " + err.Error()
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return err.Error()
	}
	chunks := max((want.Size+chunk-1)/chunk, 1)
	first, count := int64(0), chunks
	if want.Part > 0 {
		per := want.PartSize / chunk
		first = (want.Part - 1) * per
		count = min(per, chunks-first)
	}
	from, to := first*chunk, min(want.Size, (first+count)*chunk) // the plaintext it holds
	if n := to - from + count*tag; int64(len(body)) != n {
		return fmt.Sprintf("%d bytes, want %d (chunks %d to %d sealed)", len(body), n, first, first+count-1)
	}
	file := conformanceFile(want.Size)
	for i := first; i < first+count; i++ {
		nonce := make([]byte, 12)
		binary.BigEndian.PutUint64(nonce[4:], uint64(i))
		ad := []byte{0}
		if i == chunks-1 {
			ad[0] = 1
		}
		lo, hi := i*chunk, min(want.Size, (i+1)*chunk)
		at := (lo - from) + (i-first)*tag
		plain, err := gcm.Open(nil, nonce, body[at:at+(hi-lo)+tag], ad)
		if err != nil {
			return fmt.Sprintf("chunk %d does not open with the key as chunk %d of %d", i-first, i, chunks)
		}
		if !bytes.Equal(plain, file[lo:hi]) {
			return fmt.Sprintf("chunk %d opens to other bytes than the file's %d to %d", i, lo, hi-1)
		}
	}
	return ""
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

// loggedHeaders are the request headers a scenario can match:
// Authorization (the gateway's token must not go to the store) and
// X-Amz-Meta-Upload (the header the scenarios' upload answers give).
var loggedHeaders = []string{"If-None-Match", "Authorization", "X-Amz-Meta-Upload"}

// matches reports whether lr satisfies m: the same method and path, each
// query parameter and header of m with the same value ("*": present,
// "-": absent), and m's body a subset of lr's.
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
		got, ok := lr.Headers[http.CanonicalHeaderKey(k)]
		if v == "-" && ok || v != "-" && (!ok || v != "*" && v != got) {
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
		{matcher{Path: "/v1/sync", Headers: map[string]string{"If-None-Match": "*"}}, true},
		{matcher{Path: "/v1/sync", Headers: map[string]string{"If-None-Match": "-"}}, false},
		{matcher{Path: "/v1/sync", Headers: map[string]string{"Authorization": "-"}}, true},
		{matcher{Path: "/v1/sync", Headers: map[string]string{"Authorization": "*"}}, false},
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
