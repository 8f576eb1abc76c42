package gateway

import (
	"context"
	"fmt"
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
}

// newDemo starts the demo, or skips the test when there is no Chromium.
func newDemo(t *testing.T) *demo {
	t.Helper()
	return newDemoWith(t, nil)
}

// newDemoWith is newDemo with tweak applied to the gateway's Config.
func newDemoWith(t *testing.T, tweak func(*Config)) *demo {
	t.Helper()
	bin := chromium()
	if bin == "" {
		t.Skip("no Chromium found (apt-get install -y chromium, or set INBOXD_TEST_CHROME)")
	}
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	w := newWSGatewayOn(t, env, wsOpts{
		tweak: tweak,
		ws:    WSConfig{HeartbeatInterval: time.Second},
		routes: func(mux *http.ServeMux) {
			mux.Handle("GET /{$}", web.Handler())
			mux.Handle("GET /demo/", web.Handler())
		},
	})

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelBrowser)
	require.NoError(t, chromedp.Do(browser)) // starts the browser
	return &demo{t: t, url: w.url, browser: browser, env: env}
}

// tab opens a browser context of its own, named for the console.
func (d *demo) tab(name string) context.Context {
	ctx, cancel := chromedp.NewContext(d.browser, chromedp.WithNewBrowserContext())
	require.NoError(d.t, chromedp.Do(ctx))
	read := make(chan struct{})
	go func() {
		defer close(read)
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			d.consoleMu.Lock()
			d.console = append(d.console, name+": "+m.String())
			d.consoleMu.Unlock()
		}
	}()
	d.t.Cleanup(func() {
		cancel()
		<-read
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
		list, lerr := chromedp.Run(dctx, chromedp.Evaluate[string](
			`JSON.stringify([...document.querySelectorAll('#convs li')].map((li) => ({ ...li.dataset, current: li.classList.contains('current') })))`))
		d.consoleMu.Lock()
		defer d.consoleMu.Unlock()
		d.t.Fatalf("%s: %v\npage (%v):\n%s\nlist (%v): %s\nserver: %s\nconsole:\n%s", what, err, perr, page, lerr, list,
			d.serverState(), strings.Join(d.console, "\n"))
	}
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
		until(`document.querySelector('#catchup').textContent === 'caught up 3 missed entries'`),
	)
	// And live again, both ways.
	d.say(bob, "back")
	d.do(alice, "see bob's answer", until(has("back")))
	d.screenshots("demo", map[string]context.Context{"alice": alice, "bob": bob})
}
