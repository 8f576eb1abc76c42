// Package web is the demo page of inboxd: plain HTML and ES modules,
// embedded in the binary, that log in as any user id (dev mode's token
// endpoint), list the conversations, show one with its history, send, edit,
// delete, react to, reply to and report messages, send and show attachments
// (images with their thumbnails, files to download), show unread and
// mention badges, "seen by" receipts, who is typing and the members'
// online dots.
//
// The protocol is the TypeScript SDK's (@inboxd/client), committed as the
// browser bundle static/inboxd-client.js (built in clients/typescript; no
// Node is needed to serve it): it follows the inbox over the WebSocket or
// long-polling, keeps the cursor, epoch, holes and outbox in IndexedDB (one
// database per user) and makes every request. The page's own scripts only
// render, and keep a copy of what they drew in an IndexedDB database of
// their own, so that a reload while offline still shows the conversations
// and the unsent messages. It has an offline switch to show the catch-up.
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

// csp is the page's Content-Security-Policy: its own scripts and styles
// only. Attachments widen two sources: the page fetches sealed files from
// the object store's presigned URLs, on whatever origin the store has (a
// bucket's, or the gateway's own for a directory; it is not known when the
// page is served), and draws the files it opened from blob: object URLs.
const csp = "default-src 'self'; connect-src 'self' ws: wss: http: https: blob:; img-src 'self' blob:; style-src 'self'; script-src 'self'"

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
			w.Header().Set("Content-Security-Policy", csp)
			http.ServeFileFS(w, r, sub, "index.html")
		case len(r.URL.Path) > len("/demo/") && r.URL.Path[:len("/demo/")] == "/demo/":
			files.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}
