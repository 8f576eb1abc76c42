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

// TestWSBrowserDemo is acceptance 5: headless Chromium drives the web demo
// served beside the gateway. User 1 and user 2 log in, each in its own
// browser context (separate storage); 1 creates a conversation with 2 and
// sends; 2 sees it live. 2 goes offline, 1 sends three more, 2 comes back
// online and its catch-up from the stored cursor brings exactly those.
func TestWSBrowserDemo(t *testing.T) {
	bin := chromium()
	if bin == "" {
		t.Skip("no Chromium found (apt-get install -y chromium, or set INBOXD_TEST_CHROME)")
	}
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	w := newWSGatewayOn(t, env, wsOpts{
		ws: WSConfig{HeartbeatInterval: time.Second},
		routes: func(mux *http.ServeMux) {
			mux.Handle("GET /{$}", web.Handler())
			mux.Handle("GET /demo/", web.Handler())
		},
	})

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	require.NoError(t, chromedp.Do(browser)) // starts the browser
	// The pages' console, shown when a step fails.
	var consoleMu sync.Mutex
	var console []string
	var readers sync.WaitGroup
	tab := func(name string) context.Context {
		ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
		require.NoError(t, chromedp.Do(ctx))
		readers.Add(1)
		go func() {
			defer readers.Done()
			for m, err := range chromedp.Console(ctx) {
				if err != nil {
					return
				}
				consoleMu.Lock()
				console = append(console, name+": "+m.String())
				consoleMu.Unlock()
			}
		}()
		t.Cleanup(func() {
			cancel()
			readers.Wait()
		})
		return ctx
	}
	alice, bob := tab("alice"), tab("bob")

	// Every step has a generous bound against hangs only.
	do := func(ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
			defer dcancel()
			page, perr := chromedp.Run(dctx, chromedp.Evaluate[string](`document.body.innerText`))
			consoleMu.Lock()
			defer consoleMu.Unlock()
			t.Fatalf("%s: %v\npage (%v):\n%s\nconsole:\n%s", what, err, perr, page, strings.Join(console, "\n"))
		}
	}
	until := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(20*time.Millisecond))
	}
	has := func(text string) string {
		return fmt.Sprintf(`[...document.querySelectorAll('#messages .msg .body')].some(e => e.textContent === %q)`, text)
	}
	confirmed := func(text string) string { // shown with its seq
		return fmt.Sprintf(`[...document.querySelectorAll('#messages .msg[data-seq]')].some(e => e.querySelector('.body').textContent === %q)`, text)
	}
	login := func(ctx context.Context, id int) {
		do(ctx, "log in as "+strconv.Itoa(id),
			chromedp.Navigate(w.url+"/"),
			chromedp.WaitVisible("#user-id"),
			chromedp.SendKeys("#user-id", strconv.Itoa(id)),
			chromedp.Click("#login-btn"),
			until(`document.querySelector('#status').textContent === 'online'`),
		)
	}
	say := func(ctx context.Context, text string) {
		do(ctx, "send "+text,
			chromedp.SendKeys("#compose", text),
			chromedp.Click("#send-btn"),
			until(confirmed(text)),
		)
	}

	login(alice, 1)
	login(bob, 2)
	do(alice, "create a conversation",
		chromedp.SendKeys("#new-title", "demo"),
		chromedp.SendKeys("#new-members", "2"),
		chromedp.Click("#create-btn"),
		until(`document.querySelector('#view-title').textContent === 'demo'`),
	)
	// The conversation reaches bob's list by push; he opens it.
	do(bob, "open the pushed conversation",
		until(`[...document.querySelectorAll('#convs li .title')].some(e => e.textContent.startsWith('demo'))`),
		chromedp.Click(`#convs li`),
		until(`document.querySelector('#view-title').textContent === 'demo'`),
	)
	say(alice, "hello bob")
	do(bob, "see it live", until(has("hello bob")))

	do(bob, "go offline",
		chromedp.Click("#net-toggle"),
		until(`document.querySelector('#status').textContent === 'offline'`),
	)
	for i := 1; i <= 3; i++ {
		say(alice, fmt.Sprintf("missed %d", i))
	}
	missed, err := chromedp.Run(bob, chromedp.Evaluate[bool](has("missed 1")))
	require.NoError(t, err)
	require.False(t, missed, "bob is offline")

	do(bob, "come back and catch up",
		chromedp.Click("#net-toggle"),
		until(`document.querySelector('#status').textContent === 'online'`),
		until(has("missed 1")+" && "+has("missed 2")+" && "+has("missed 3")),
		until(`document.querySelector('#catchup').textContent === 'caught up 3 missed entries'`),
	)
	// And live again, both ways.
	say(bob, "back")
	do(alice, "see bob's answer", until(has("back")))
	if dir := os.Getenv("INBOXD_TEST_SCREENSHOTS"); dir != "" {
		for name, ctx := range map[string]context.Context{"alice": alice, "bob": bob} {
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(dir+"/demo-"+name+".png", png, 0o644))
		}
	}
}
