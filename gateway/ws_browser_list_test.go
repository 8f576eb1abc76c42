package gateway

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestWSBrowserOlderList: the conversation list is a snapshot, read before
// it arrives. User 2's page reads a message while its list is in flight
// (the list's snapshot taken before the read, answered after the read's
// record entry was applied); the older list must not take the record back
// to the read_seq before the read. It did: the page showed nothing unread
// and, having posted that read already, never posted it again, so the
// record stayed behind its last message.
func TestWSBrowserOlderList(t *testing.T) {
	gate := &listGate{}
	d := newDemoOpts(t, demoOpts{routes: gate.mount})
	t.Cleanup(gate.open)
	alice, bob := d.tab("alice"), d.tab("bob")
	d.login(alice, 1)
	d.login(bob, 2)
	d.converse(alice, bob, "snapshot", 2)
	d.say(alice, "one")
	d.do(bob, "read it", until(has("one")), until(readToEnd))

	d.do(bob, "go offline",
		chromedp.Click("#net-toggle"),
		until(`document.querySelector('#status').textContent === 'offline'`),
	)
	d.say(alice, "two")
	token, err := chromedp.Run(bob, chromedp.Evaluate[string](`localStorage.getItem('inboxd.2.token')`))
	require.NoError(t, err)
	require.NotEmpty(t, token)
	// lists counts the page's list answers once the page has taken them
	// (a task after the answer's body: the SDK's and setList's steps are
	// microtasks of it).
	_, err = chromedp.Run(bob, chromedp.Evaluate[chromedp.Void](`(() => {
  window.lists = 0;
  const fetch = window.fetch;
  window.fetch = async (url, init) => {
    const res = await fetch(url, init);
    if (new URL(url, location.href).pathname === '/v1/conversations' && (init?.method ?? 'GET') === 'GET') {
      const json = res.json.bind(res);
      res.json = () => json().then((v) => { setTimeout(() => { window.lists++; }); return v; });
    }
    return res;
  };
})()`))
	require.NoError(t, err)
	gate.arm(token)

	// Back online: the catch-up brings "two" and the page reads it; the
	// connection's list refresh is held, its snapshot taken before the read.
	d.do(bob, "come back and read two, the list held",
		chromedp.Click("#net-toggle"),
		until(`document.querySelector('#status').textContent === 'online'`),
		until(has("two")),
		until(readToEnd),
	)
	gate.open()
	d.do(bob, "take the older list", until(`window.lists > 0`))
	// Drawn already: the page renders in a microtask of setList.
	read, err := chromedp.Run(bob, chromedp.Evaluate[bool](readToEnd+" && "+badgeOf("snapshot")+" === '' && "+unreadTotal+" === '0'"))
	require.NoError(t, err)
	if !read {
		list, err := chromedp.Run(bob, chromedp.Evaluate[string](listState))
		require.NoError(t, err)
		t.Fatalf("the older list took the record back: list %s, unread total %s", list, d.text(bob, unreadTotal))
	}
}

// listGate holds one user's next conversation list: its snapshot is taken
// when it is asked for, its answer written only when the gate opens; that
// user's reads wait until the snapshot is taken, so it is older than them.
type listGate struct {
	api http.Handler // the gateway's

	mu     sync.Mutex
	auth   string        // the held user's Authorization; "" until armed
	held   bool          // a list is (or was) held
	taken  chan struct{} // closed once the held list's snapshot is taken
	opened chan struct{} // closed by open
}

// mount wraps the API's list and read routes.
func (g *listGate) mount(mux *http.ServeMux) {
	g.api, _ = mux.Handler(httptest.NewRequest(http.MethodGet, "/v1/conversations", nil))
	g.taken, g.opened = make(chan struct{}), make(chan struct{})
	mux.HandleFunc("GET /v1/conversations", g.list)
	mux.HandleFunc("POST /v1/conversations/{id}/read", g.read)
}

// arm holds the next list of the user whose token this is.
func (g *listGate) arm(token string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.auth = "Bearer " + token
}

// open answers the held list, and any later one at once.
func (g *listGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.opened:
	default:
		close(g.opened)
	}
}

func (g *listGate) armed(r *http.Request) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.auth != "" && r.Header.Get("Authorization") == g.auth
}

func (g *listGate) list(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	hold := !g.held && g.auth != "" && r.Header.Get("Authorization") == g.auth
	g.held = g.held || hold
	g.mu.Unlock()
	if !hold {
		g.api.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	g.api.ServeHTTP(rec, r)
	close(g.taken)
	select {
	case <-g.opened:
	case <-r.Context().Done():
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func (g *listGate) read(w http.ResponseWriter, r *http.Request) {
	if g.armed(r) {
		select {
		case <-g.taken:
		case <-r.Context().Done():
			return
		}
	}
	g.api.ServeHTTP(w, r)
}
