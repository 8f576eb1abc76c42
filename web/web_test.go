package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", Handler())
	mux.Handle("GET /demo/", Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tc := range []struct {
		path, ctype, contains string
		status                int
	}{
		{"/", "text/html", `<script type="module" src="/demo/app.js">`, 200},
		{"/demo/app.js", "javascript", "from './inboxd-client.js'", 200},
		{"/demo/inboxd-client.js", "javascript", "IndexedDBStore", 200},
		{"/demo/cache.js", "javascript", "indexedDB", 200},
		{"/demo/style.css", "text/css", "#messages", 200},
		{"/demo/counts.js", "javascript", "unread_count", 200},
		{"/demo/live.js", "javascript", "expires_in_ms", 200},
		{"/demo/files.js", "javascript", "downloadThumbnail", 200},
		// The page names its icon: a browser asks for /favicon.ico otherwise,
		// which is the API's and answers 404.
		{"/", "text/html", `<link rel="icon" href="/demo/favicon.svg"`, 200},
		{"/demo/favicon.svg", "image/svg+xml", "<svg", 200},
		{"/demo/missing.js", "", "", 404},
		{"/demo/", "", "", 404},
		{"/index.html", "", "", 404},
	} {
		res, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.path, res.StatusCode, tc.status)
			continue
		}
		if tc.status != 200 {
			continue
		}
		if ct := res.Header.Get("Content-Type"); !strings.Contains(ct, tc.ctype) {
			t.Errorf("%s: content type %q, want %q", tc.path, ct, tc.ctype)
		}
		if !strings.Contains(string(body), tc.contains) {
			t.Errorf("%s: body lacks %q", tc.path, tc.contains)
		}
	}
}
