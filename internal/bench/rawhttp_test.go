package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// rawTestServer answers the paths the raw client's tests use and counts the
// connections it accepts.
func rawTestServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /len/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		if r.Header.Get("Authorization") != "Bearer tok" || r.Host == "" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		_, _ = io.WriteString(w, strings.Repeat("x", n))
	})
	mux.HandleFunc("GET /chunked/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		for i := 0; i < n; i += 1000 {
			_, _ = io.WriteString(w, strings.Repeat("y", min(1000, n-i)))
			w.(http.Flusher).Flush() // one chunk each
		}
	})
	mux.HandleFunc("GET /etag", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"1.2"`)
		if r.Header.Get("If-None-Match") == `"1.2"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = io.WriteString(w, `{"entries":[]}`)
	})
	mux.HandleFunc("GET /limited", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, `{"error":{"code":"rate_limited"}}`, http.StatusTooManyRequests)
	})
	mux.HandleFunc("GET /close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "bye")
	})
	// Raw answers the server writes itself, then closes the connection.
	raw := map[string]string{
		"/cut":         "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b",
		"/cutchunk":    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc",
		"/nolength":    "HTTP/1.1 200 OK\r\n\r\nuntil the end",
		"/gzip":        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"/headersonly": "HTTP/1.1 200 OK\r\nContent-Len",
		"/nothing":     "",
	}
	for path, answer := range raw {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			c, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = bw.WriteString(answer)
			_ = bw.Flush()
			_ = c.Close()
		})
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func TestRawConn(t *testing.T) {
	srv, conns := rawTestServer(t)
	ctx := context.Background()
	c := newRawConn(sourceDialer(nil, time.Second), srv.Listener.Addr().String(), 5*time.Second)
	defer c.close()
	get := func(path, etag string, keep bool) (rawResp, error) {
		t.Helper()
		return c.get(ctx, []byte(path), "tok", etag, keep)
	}
	mustGet := func(path, etag string, keep bool, status int, n int64) rawResp {
		t.Helper()
		r, err := get(path, etag, keep)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		if r.Status != status || r.N != n {
			t.Fatalf("GET %s: status %d, %d body bytes; want %d, %d", path, r.Status, r.N, status, n)
		}
		if keep && int64(len(r.Body)) != n {
			t.Fatalf("GET %s: kept %d body bytes of %d", path, len(r.Body), n)
		}
		return r
	}

	// Content-Length bodies, kept and discarded, large and small, on one
	// keep-alive connection.
	for _, n := range []int64{0, 1, 15000, 100000, 3} {
		r := mustGet(fmt.Sprintf("/len/%d", n), "", true, 200, n)
		if strings.Trim(string(r.Body), "x") != "" {
			t.Fatalf("body of /len/%d is not all x", n)
		}
		mustGet(fmt.Sprintf("/len/%d", n), "", false, 200, n)
	}
	// Chunked bodies.
	r := mustGet("/chunked/15500", "", true, 200, 15500)
	if strings.Trim(string(r.Body), "y") != "" {
		t.Fatal("chunked body is not all y")
	}
	mustGet("/chunked/15500", "", false, 200, 15500)
	// 304 (no body), 200 without the tag, 429 with a body.
	mustGet("/etag", `"1.2"`, false, 304, 0)
	mustGet("/etag", "", true, 200, int64(len(`{"entries":[]}`)))
	mustGet("/limited", "", false, 429, int64(len(`{"error":{"code":"rate_limited"}}`)+1))
	if c.dials != 1 || conns.Load() != 1 {
		t.Fatalf("%d dials, %d connections accepted; want one keep-alive connection", c.dials, conns.Load())
	}

	// Connection: close ends the connection; the next request dials.
	r = mustGet("/close", "", true, 200, 3)
	if !r.Close || c.conn != nil {
		t.Fatalf("Connection: close: Close %v, conn %v", r.Close, c.conn)
	}
	mustGet("/len/10", "", false, 200, 10)
	if c.dials != 2 || conns.Load() != 2 {
		t.Fatalf("after Connection: close: %d dials, %d connections; want 2", c.dials, conns.Load())
	}

	// Answers cut short, or that the client refuses: an error, and the next
	// request works on a new connection.
	// A reused connection closed without a byte of answer is tried once
	// more on a new one (see TestRawConnIdleClosed): /nothing dials twice.
	for _, tc := range []struct {
		path, want string
		dials      int
	}{
		{"/cut", "unexpected EOF", 1},
		{"/cutchunk", "unexpected EOF", 1},
		{"/nolength", "without Content-Length", 1},
		{"/gzip", "unsupported Transfer-Encoding", 1},
		{"/headersonly", "unexpected EOF", 1},
		{"/nothing", "EOF", 2},
	} {
		before := c.dials
		if _, err := get(tc.path, "", true); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("GET %s: error %v, want one with %q", tc.path, err, tc.want)
		} else {
			t.Logf("GET %s: %v", tc.path, err)
		}
		if c.conn != nil {
			t.Fatalf("GET %s: the connection is still open after the error", tc.path)
		}
		mustGet("/len/20", "", true, 200, 20)
		if c.dials != before+tc.dials {
			t.Fatalf("GET %s: %d dials after, %d before; want %d", tc.path, c.dials, before, tc.dials)
		}
	}
}

// A keep-alive connection that the server closed while idle is dialed again
// without an error, as net/http's client does.
func TestRawConnIdleClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			// One answer per connection, then a silent close.
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}()
		}
	}()
	c := newRawConn(sourceDialer(nil, time.Second), ln.Addr().String(), 5*time.Second)
	defer c.close()
	for i := 0; i < 3; i++ {
		r, err := c.get(context.Background(), []byte("/"), "tok", "", true)
		if err != nil || r.Status != 200 || string(r.Body) != "ok" {
			t.Fatalf("request %d: %+v, %v", i, r, err)
		}
		time.Sleep(20 * time.Millisecond) // the server closes
	}
	if c.dials != 3 {
		t.Fatalf("%d dials, want 3", c.dials)
	}
}

// The request is written as the gateway expects it.
func TestRawConnRequest(t *testing.T) {
	got := make(chan *http.Request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	c := newRawConn(sourceDialer(nil, time.Second), addr, 5*time.Second)
	defer c.close()
	if _, err := c.get(context.Background(), []byte("/v1/sync?after=5&epoch=7"), "abc.def", `"7.5"`, false); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.Method != "GET" || r.URL.Path != "/v1/sync" || r.URL.Query().Get("after") != "5" || r.Host != addr ||
		r.Header.Get("Authorization") != "Bearer abc.def" || r.Header.Get("If-None-Match") != `"7.5"` || r.ProtoMinor != 1 {
		t.Fatalf("request %s %s %s host %s headers %v", r.Method, r.URL, r.Proto, r.Host, r.Header)
	}
}

// runSyncPhase over the raw client, against a fake of GET /v1/sync.
func TestSyncPhaseRaw(t *testing.T) {
	const page, head, epoch = 5, 40, 3
	etag := `"3.40"`
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sync", func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer t") {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		n, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		entries := make([]map[string]any, min(n, page)) // at most page
		for i := range entries {
			entries[i] = map[string]any{"seq": i, "text": strings.Repeat("z", 3000)} // chunked
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"epoch": epoch, "head": head, "entries": entries})
	})
	mux.HandleFunc("GET /bench/trivial", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"user_id":1}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cfg := syncWorkerConfig{Addr: srv.Listener.Addr().String(), Users: 3, Head: head, Epoch: epoch, Page: page, Conns: 4}
	conns := make([]*rawConn, cfg.Conns)
	for i := range conns {
		conns[i] = newRawConn(sourceDialer(nil, time.Second), cfg.Addr, 5*time.Second)
		defer conns[i].close()
	}
	tokens := []string{"t1", "t2", "t3"}
	for _, mode := range []string{"page", "304", "trivial"} {
		p := runSyncPhase(context.Background(), cfg, conns, tokens, syncPhaseCmd{Mode: mode, Seconds: 0.3})
		want := "200"
		if mode == "304" {
			want = "304"
		}
		if p.Requests == 0 || p.Errors != 0 || p.Statuses[want] != int(p.Requests) || len(p.Statuses) != 1 || p.FirstErr != "" {
			t.Fatalf("%s: %+v", mode, p)
		}
		if mode == "page" && (p.Checked == 0 || p.BadPages != 0 || p.RespBytes < page*3000) {
			t.Fatalf("page: %d checked, %d bad, %.0f bytes per answer", p.Checked, p.BadPages, p.RespBytes)
		}
		t.Logf("%s: %d requests, %.0f/s, %.0f bytes each, p50 %.2f ms", mode, p.Requests, p.PerSec, p.RespBytes, p.Latency.P50)
	}
	for i, c := range conns {
		if c.dials != 1 {
			t.Fatalf("connection %d dialed %d times", i, c.dials)
		}
	}
	// A short page is a bad one; a wrong token is an error with its status.
	cfg.Page = page + 1
	p := runSyncPhase(context.Background(), cfg, conns, tokens, syncPhaseCmd{Mode: "page", Seconds: 0.1})
	if p.Checked == 0 || p.BadPages != p.Checked || p.Errors != 0 {
		t.Fatalf("short pages: %+v", p)
	}
	p = runSyncPhase(context.Background(), cfg, conns, []string{"x", "y", "z"}, syncPhaseCmd{Mode: "page", Seconds: 0.1})
	if p.Requests != 0 || p.Errors == 0 || p.Statuses["401"] != int(p.Errors) || !strings.Contains(p.FirstErr, "HTTP 401 for http://") {
		t.Fatalf("bad token: %+v", p)
	}
}

// A request in flight ends when its context does.
func TestRawConnCancel(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block }))
	defer srv.Close()
	defer close(block)
	ctx, cancel := context.WithCancel(context.Background())
	c := newRawConn(sourceDialer(nil, time.Second), srv.Listener.Addr().String(), time.Minute)
	defer c.close()
	time.AfterFunc(50*time.Millisecond, cancel)
	t0 := time.Now()
	if _, err := c.get(ctx, []byte("/"), "tok", "", false); err == nil || time.Since(t0) > 10*time.Second {
		t.Fatalf("error %v after %v", err, time.Since(t0))
	}
}

func TestRawConnPost(t *testing.T) {
	type seen struct {
		method, path, auth, ctype string
		body                      []byte
	}
	got := make(chan seen, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), b}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"seq":1}`))
	}))
	defer srv.Close()
	c := newRawConn(sourceDialer(nil, time.Second), srv.Listener.Addr().String(), 5*time.Second)
	defer c.close()
	for _, body := range []string{`{"msg_id":"a","body":"x"}`, `{"msg_id":"b","body":"` + strings.Repeat("y", 5000) + `"}`} {
		resp, err := c.post(context.Background(), []byte("/v1/conversations/3/messages"), "tok", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != http.StatusCreated || resp.N != 9 {
			t.Fatalf("answer %+v", resp)
		}
		s := <-got
		if s.method != "POST" || s.path != "/v1/conversations/3/messages" || s.auth != "Bearer tok" ||
			s.ctype != "application/json" || string(s.body) != body {
			t.Fatalf("request %+v", s)
		}
	}
	if c.dials != 1 {
		t.Fatalf("%d dials for two requests on one keep-alive connection", c.dials)
	}
}
