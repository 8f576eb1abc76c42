// Package web is the demo page of inboxd: plain HTML and JavaScript, embedded
// in the binary, that logs in as any user id (dev mode's token endpoint),
// lists the conversations, shows one with its history, sends, edits,
// deletes, reacts to and replies to messages, shows unread and mention
// badges, "seen by" receipts, who is typing and the members' online dots,
// and follows the inbox live over the WebSocket (update entries, typing,
// presence and receipt frames included) with docs/protocol.md's
// client rules: the
// cursor persisted in localStorage, jittered reconnect backoff, catch-up on
// reconnect, too_long handled by refreshing the list, an outbox retried with
// the same msg_id, and long-polling when the WebSocket keeps failing. It has
// an offline switch to show the catch-up.
//
// It owns no API: it only calls the gateway's, on the same origin. It must
// not be served where dev mode is off (it logs in through /v1/dev/token):
// `inboxd dev` mounts it beside the API (gateway.Config.Pages).
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the demo: the page at "/" and its assets under "/demo/".
// Mount it for exactly those paths, e.g.
//
//	mux.Handle("GET /{$}", web.Handler())
//	mux.Handle("GET /demo/", web.Handler())
//
// Anything else answers 404.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix("/demo/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		switch {
		case r.URL.Path == "/":
			w.Header().Set("Content-Security-Policy", "default-src 'self'; connect-src 'self' ws: wss:; style-src 'self'; script-src 'self'")
			http.ServeFileFS(w, r, sub, "index.html")
		case len(r.URL.Path) > len("/demo/") && r.URL.Path[:len("/demo/")] == "/demo/":
			files.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}
