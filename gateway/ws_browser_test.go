package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/web"
)

// chromium finds a Chromium or Chrome binary: $INBOXD_TEST_CHROME, then the
// usual names on PATH (Debian: apt-get install -y chromium).
func chromium() string {
	if p := os.Getenv("INBOXD_TEST_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// demo is the web demo served beside a gateway (with a fanout, on a fresh
// environment) and one headless Chromium to drive it; each tab is a user
// in its own browser context (separate storage).
type demo struct {
	t       *testing.T
	url     string
	browser context.Context
	env     *testenv.Env // the server's side of a failed step is read from it

	consoleMu sync.Mutex
	console   []string // the pages' console, shown when a step fails
	unloaded  []string // its entries for the page's own files that did not load
}

// demoOpts adjust the server of a demo.
type demoOpts struct {
	tweak func(*Config) // applied to the gateway's Config
	// routes adds handlers after the demo's; one may wrap the API's,
	// which mux.Handler finds.
	routes func(mux *http.ServeMux)
	// wrapLn replaces or wraps the server's listener (wsOpts.wrapLn).
	wrapLn func(net.Listener) net.Listener
}

// newDemo starts the demo, or skips the test when there is no Chromium.
func newDemo(t *testing.T) *demo {
	t.Helper()
	return newDemoOpts(t, demoOpts{})
}

// newDemoWith is newDemo with tweak applied to the gateway's Config.
func newDemoWith(t *testing.T, tweak func(*Config)) *demo {
	t.Helper()
	return newDemoOpts(t, demoOpts{tweak: tweak})
}

// newDemoOpts is newDemo with o.
func newDemoOpts(t *testing.T, o demoOpts) *demo {
	t.Helper()
	bin := chromium()
	if bin == "" {
		t.Skip("no Chromium found (apt-get install -y chromium, or set INBOXD_TEST_CHROME)")
	}
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	w := newWSGatewayOn(t, env, wsOpts{
		tweak:  o.tweak,
		wrapLn: o.wrapLn,
		ws:     WSConfig{HeartbeatInterval: time.Second},
		routes: func(mux *http.ServeMux) {
			mux.Handle("GET /{$}", web.Handler())
			mux.Handle("GET /demo/", web.Handler())
			if o.routes != nil {
				o.routes(mux)
			}
		},
	})

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelBrowser)
	began := time.Now()
	launch(t, "start Chromium", func() error { return chromedp.Do(browser) })
	t.Logf("Chromium started in %v", time.Since(began).Round(time.Millisecond))
	return &demo{t: t, url: w.url, browser: browser, env: env}
}

// launchTimeout bounds the start of Chromium and of a tab, apart from the
// steps' bound: the first start on a fresh machine (a cold page cache, a
// new profile, fontconfig's caches being built) can take tens of seconds,
// which must not eat into the first step's minute.
const launchTimeout = 3 * time.Minute

// launch runs start, the first Run of a chromedp context, failing the test
// if it has not returned within launchTimeout. The bound cannot be a
// timeout on the context: the first Run's context is the browser's (or
// the tab's) for its whole life. The test's cleanups stop a start that
// hangs.
func launch(t *testing.T, what string, start func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- start() }()
	select {
	case err := <-done:
		require.NoError(t, err, what)
	case <-time.After(launchTimeout):
		t.Fatalf("%s: not done in %v", what, launchTimeout)
	}
}

// tab opens a browser context of its own, named for the console.
func (d *demo) tab(name string) context.Context {
	ctx, cancel := chromedp.NewContext(d.browser, chromedp.WithNewBrowserContext())
	launch(d.t, "open a tab for "+name, func() error { return chromedp.Do(ctx) })
	read := make(chan struct{})
	go func() {
		defer close(read)
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			line := name + ": " + m.String()
			if m.Source != "" && m.URL != "" {
				// The browser's own entries ("Failed to load resource")
				// name what they are about only here.
				line += " (" + m.URL + ")"
			}
			d.consoleMu.Lock()
			d.console = append(d.console, line)
			if m.Source == "network" && strings.HasPrefix(m.Text, "Failed to load resource") && !strings.Contains(m.URL, "/v1/") {
				d.unloaded = append(d.unloaded, line)
			}
			d.consoleMu.Unlock()
		}
	}()
	d.t.Cleanup(func() {
		cancel()
		<-read
		d.consoleMu.Lock()
		defer d.consoleMu.Unlock()
		// The API's requests fail where a test cuts the network; the
		// page's own files (and its icon) always load.
		for _, line := range d.unloaded {
			d.t.Errorf("the page did not load one of its files: %s", line)
		}
		d.unloaded = nil
	})
	return ctx
}

// do runs steps in a tab, failing the test with the page's text and the
// console when one fails. Every step has a generous bound against hangs only.
func (d *demo) do(ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	d.t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		defer dcancel()
		page, perr := chromedp.Run(dctx, chromedp.Evaluate[string](`document.body.innerText`))
		list, lerr := chromedp.Run(dctx, chromedp.Evaluate[string](listState))
		d.consoleMu.Lock()
		defer d.consoleMu.Unlock()
		d.t.Fatalf("%s: %v\npage (%v):\n%s\nlist (%v): %s\nserver: %s\nconsole:\n%s", what, err, perr, page, lerr, list,
			d.serverState(), strings.Join(d.console, "\n"))
	}
}

// listState is the conversation list's datasets (the records as the
// server sent them) and which one is open, as JSON.
const listState = `JSON.stringify([...document.querySelectorAll('#convs li')].map((li) => ({ ...li.dataset, current: li.classList.contains('current') })))`

// text is the value of a JavaScript expression in a tab, or the error.
func (d *demo) text(ctx context.Context, expr string) string {
	d.t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		return err.Error()
	}
	return v
}

// serverState is what PostgreSQL holds of the users' inboxes and records,
// for a failed step's report: the page's side alone cannot tell a push
// that never came from a page that did not show it.
func (d *demo) serverState() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out string
	err := d.env.Pool.QueryRow(ctx, `SELECT coalesce((SELECT string_agg(format('user %s head %s', id, inbox_seq), '; ' ORDER BY id) FROM users), '')
  || ' | ' || coalesce((SELECT string_agg(format('record %s/%s read %s version %s', user_id, conversation_id, read_seq, version), '; '
       ORDER BY user_id, conversation_id) FROM records), '')`).Scan(&out)
	if err != nil {
		return err.Error()
	}
	return out
}

// readHead waits until PostgreSQL holds user's record of conversation read
// up to seq, and returns the user's inbox head then: the record entry of
// that read is at or below it (the projection writes both in one
// transaction).
func (d *demo) readHead(user, conversation, seq int64) int64 {
	d.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var read, head int64
		err := d.env.UserPool(user).QueryRow(context.Background(), `SELECT r.read_seq, u.inbox_seq FROM records r JOIN users u ON u.id = r.user_id
WHERE r.user_id = $1 AND r.conversation_id = $2`, user, conversation).Scan(&read, &head)
		if err == nil && read >= seq {
			return head
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("user %d's record of %d not read to %d in 60s (read %d, err %v); server: %s", user, conversation, seq, read, err, d.serverState())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// until waits for a JavaScript expression to be true: the page's state,
// never a sleep.
func until(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(20*time.Millisecond))
}

// press clicks the element sel selects, found and clicked in one step
// of the page (a message row can be drawn again between a lookup and a
// click of chromedp's, when a receipt or an update arrives).
func press(sel string) chromedp.Action[chromedp.Void] {
	return until(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true })()`, sel))
}

// readToEnd: the open conversation's record (as the server sent it) is
// read up to its last message.
const readToEnd = `document.querySelector('#convs li.current')?.dataset.readSeq === document.querySelector('#convs li.current')?.dataset.lastSeq`

// has: a message with this text is shown.
func has(text string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#messages .msg .body')].some(e => e.textContent === %q)`, text)
}

// confirmed: a message with this text is shown with its seq.
func confirmed(text string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#messages .msg[data-seq]')].some(e => e.querySelector('.body').textContent === %q)`, text)
}

func (d *demo) login(ctx context.Context, id int) {
	d.t.Helper()
	d.do(ctx, "log in as "+strconv.Itoa(id),
		chromedp.Navigate(d.url+"/"),
		chromedp.WaitVisible("#user-id"),
		chromedp.SendKeys("#user-id", strconv.Itoa(id)),
		chromedp.Click("#login-btn"),
		until(`document.querySelector('#status').textContent === 'online'`),
	)
}

func (d *demo) say(ctx context.Context, text string) {
	d.t.Helper()
	d.do(ctx, "send "+text,
		chromedp.SendKeys("#compose", text),
		chromedp.Click("#send-btn"),
		until(confirmed(text)),
	)
}

// converse has creator create a conversation titled title with member and
// member open it once it is pushed to its list.
func (d *demo) converse(creator, member context.Context, title string, memberID int) {
	d.t.Helper()
	d.do(creator, "create a conversation",
		chromedp.SendKeys("#new-title", title),
		chromedp.SendKeys("#new-members", strconv.Itoa(memberID)),
		chromedp.Click("#create-btn"),
		until(fmt.Sprintf(`document.querySelector('#view-title').textContent === %q`, title)),
	)
	d.do(member, "open the pushed conversation",
		until(fmt.Sprintf(`[...document.querySelectorAll('#convs li .title')].some(e => e.textContent.startsWith(%q))`, title)),
		press(`#convs li`),
		until(fmt.Sprintf(`document.querySelector('#view-title').textContent === %q`, title)),
	)
}

// screenshots saves each tab's page under $INBOXD_TEST_SCREENSHOTS, if set.
func (d *demo) screenshots(prefix string, tabs map[string]context.Context) {
	d.t.Helper()
	dir := os.Getenv("INBOXD_TEST_SCREENSHOTS")
	if dir == "" {
		return
	}
	for name, ctx := range tabs {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(d.t, err)
		require.NoError(d.t, os.WriteFile(dir+"/"+prefix+"-"+name+".png", png, 0o644))
	}
}

// TestWSBrowserDemo is acceptance 5: headless Chromium drives the web demo
// served beside the gateway. User 1 and user 2 log in, each in its own
// browser context (separate storage); 1 creates a conversation with 2 and
// sends; 2 sees it live. 2 goes offline, 1 sends three more, 2 comes back
// online and its catch-up from the stored cursor brings exactly those.
func TestWSBrowserDemo(t *testing.T) {
	d := newDemo(t)
	alice, bob := d.tab("alice"), d.tab("bob")

	d.login(alice, 1)
	d.login(bob, 2)
	d.converse(alice, bob, "demo", 2)
	d.say(alice, "hello bob")
	// Bob's page reads what it shows: wait for his read's record entry, so
	// that the catch-up below brings only what he missed.
	d.do(bob, "see it live and read it", until(has("hello bob")), until(readToEnd))
	// The list shows the read as its answer came, before the projection
	// stored it; the page can read twice (the first message, then the
	// next). Wait for the stored record to be read to the end, then for
	// the cursor to reach the head that holds its entry, or the entry
	// would count as missed below.
	head := d.readHead(2, 1, 2)
	d.do(bob, "receive the read's record entry", until(fmt.Sprintf(`document.querySelector('#cursor').textContent === '%d'`, head)))

	d.do(bob, "go offline",
		chromedp.Click("#net-toggle"),
		until(`document.querySelector('#status').textContent === 'offline'`),
	)
	for i := 1; i <= 3; i++ {
		d.say(alice, fmt.Sprintf("missed %d", i))
	}
	missed, err := chromedp.Run(bob, chromedp.Evaluate[bool](has("missed 1")))
	require.NoError(t, err)
	require.False(t, missed, "bob is offline")

	d.do(bob, "come back and catch up",
		chromedp.Click("#net-toggle"),
		until(`document.querySelector('#status').textContent === 'online'`),
		until(has("missed 1")+" && "+has("missed 2")+" && "+has("missed 3")),
		// The three messages, and any record entry of a read of the page's
		// that was projected after the cursor went offline (the page can
		// read twice, and a late read is an entry missed like the others).
		until(`/^caught up ([3-9]|[1-9][0-9]+) missed entries$/.test(document.querySelector('#catchup').textContent)`),
	)
	// And live again, both ways.
	d.say(bob, "back")
	d.do(alice, "see bob's answer", until(has("back")))
	d.screenshots("demo", map[string]context.Context{"alice": alice, "bob": bob})
}
