package gateway

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/attachments"
)

// TestWSBrowserAttachments: files in the demo, on a gateway whose store is
// a directory it signs URLs for (a LocalStore on the gateway's own origin).
// User 1 picks files in the composer's file input: one too large (413) and
// one of a type the server does not take (400) are refused in the draft,
// with their reason; a PNG uploads and is sent with a text. User 2's page
// shows its name, type and size, then the thumbnail the gateway made
// (opened in the page, 320 pixels wide: not the 400-pixel image). User 1
// sends a text file alone; user 2 downloads it, and the bytes behind the
// Save link's object URL are the bytes uploaded. When user 1 deletes both
// messages, their attachments leave user 2's page and the object URLs it
// made are revoked.
func TestWSBrowserAttachments(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	// The store signs URLs on the gateway's address: the demo's server
	// listens on ln.
	store, err := attachments.NewLocal(t.TempDir(), "http://"+ln.Addr().String(), []byte("local-store-secret-0123456789"))
	require.NoError(t, err)
	const maxSize = 64 << 10
	d := newDemoOpts(t, demoOpts{
		tweak: func(c *Config) {
			c.Attachments.Store = store
			c.Attachments.MaxSize = maxSize
			c.Attachments.Types = []string{"image/*", "text/plain"}
			c.Attachments.ThumbnailInterval = 100 * time.Millisecond
		},
		wrapLn: func(own net.Listener) net.Listener {
			own.Close()
			return ln
		},
	})
	alice, bob := d.tab("alice"), d.tab("bob")
	for _, tab := range []context.Context{alice, bob} {
		// Saving a download writes nothing on the test machine.
		_, err := chromedp.CallBrowser(tab, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
			Behavior: browser.SetDownloadBehaviorBehaviorDeny, BrowserContextID: chromedp.FromContext(tab).BrowserContextID})
		require.NoError(t, err)
	}
	d.login(alice, 1)
	d.login(bob, 2)
	d.converse(alice, bob, "files", 2)

	dir := t.TempDir()
	picture := testPNG(t, 400, 300)
	notes := []byte("notes from alice\nsecond line ✓\n\x00\x01\x02 bytes, not only text\n")
	files := map[string][]byte{
		"dot.png":   picture,
		"notes.txt": notes,
		"big.txt":   bytes.Repeat([]byte("x"), maxSize+1),
		"data.bin":  {0xde, 0xad, 0xbe, 0xef},
	}
	path := map[string]string{}
	for name, b := range files {
		path[name] = filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path[name], b, 0o600))
	}

	// draft is a JavaScript expression for the composer's entry of a file.
	draft := func(name string) string {
		return fmt.Sprintf(`[...document.querySelectorAll('#draft li')].find(li => li.querySelector('.name').textContent === %q)`, name)
	}
	d.do(alice, "files the server refuses stay in the draft, with the reason",
		chromedp.SetUploadFiles("#attach-input", []string{path["big.txt"], path["data.bin"]}),
		until(draft("big.txt")+`?.dataset.state === 'refused' && `+draft("big.txt")+`.querySelector('.state').textContent.startsWith('too large: ')`),
		until(draft("data.bin")+`?.dataset.state === 'refused' && `+draft("data.bin")+`.querySelector('.state').textContent === 'not accepted: files of type application/octet-stream are not accepted here'`),
		until(`document.querySelector('#notice').textContent.includes(': too large: ') || document.querySelector('#notice').textContent.includes(': not accepted: ')`),
		press(`#draft .remove[aria-label="remove big.txt"]`),
		press(`#draft .remove[aria-label="remove data.bin"]`),
		until(`document.querySelector('#draft').hidden && !document.querySelector('#draft li')`),
	)

	d.do(alice, "upload a picture and send it with a text",
		chromedp.SetUploadFiles("#attach-input", []string{path["dot.png"]}),
		until(draft("dot.png")+`?.dataset.state === 'ready' && !document.querySelector('#send-btn').disabled`),
		chromedp.SendKeys("#compose", "a picture"),
		chromedp.Click("#send-btn"),
		until(confirmed("a picture")),
		until(`document.querySelector('#draft').hidden`),
	)
	// row is a JavaScript expression for the shown message that attaches name.
	row := func(name string) string {
		return fmt.Sprintf(`[...document.querySelectorAll('#messages .msg[data-seq]')].find(e => [...e.querySelectorAll('.attachment .name')].some(n => n.textContent === %q))`, name)
	}
	// att is one for the attachment itself.
	att := func(name string) string {
		return fmt.Sprintf(`[...document.querySelectorAll('#messages .msg[data-seq] .attachment')].find(a => a.querySelector('.name')?.textContent === %q)`, name)
	}
	described := func(name, ctype string, size int) string {
		a := att(name)
		return fmt.Sprintf(`%s?.querySelector('.type')?.textContent === %q && %s.querySelector('.size').textContent === %q && %s.querySelector('.size').title === '%d bytes'`,
			a, ctype, a, humanSize(size), a, size)
	}
	thumb := att("dot.png") + `?.querySelector('img[data-source="thumbnail"]')`
	d.do(bob, "see the picture's name, type and size, then its thumbnail",
		until(row("dot.png")+`?.querySelector('.body').textContent === 'a picture'`),
		until(described("dot.png", "image/png", len(picture))),
		until(fmt.Sprintf(`%s?.complete && %s.naturalWidth === 320 && %s.naturalHeight === 240 && %s.alt === 'dot.png' && %s.src.startsWith('blob:')`,
			thumb, thumb, thumb, thumb, thumb)),
	)
	d.do(alice, "see her own picture's thumbnail too",
		until(fmt.Sprintf(`%s?.complete && %s.naturalWidth === 320`, thumb, thumb)))

	d.do(alice, "send a text file alone",
		chromedp.SetUploadFiles("#attach-input", []string{path["notes.txt"]}),
		until(draft("notes.txt")+`?.dataset.state === 'ready' && !document.querySelector('#send-btn').disabled`),
		chromedp.Click("#send-btn"),
		until(row("notes.txt")+`?.querySelector('.body').textContent === ''`),
	)
	save := att("notes.txt") + `?.querySelector('a.save[href^="blob:"]')`
	d.do(bob, "see the file, download it",
		until(described("notes.txt", "text/plain", len(notes))),
		// A file without text reads as its name in the list.
		until(`document.querySelector('#convs li.current .last')?.textContent === '1: 📎 notes.txt'`),
		until(`(() => { const b = `+att("notes.txt")+`?.querySelector('button.download'); if (!b || b.disabled) return false; b.click(); return true })()`),
		until(save+`?.download === 'notes.txt'`),
	)
	saved, err := chromedp.Run(bob, chromedp.Evaluate[string](fmt.Sprintf(`(async () => {
  const b = new Uint8Array(await (await fetch(%s.href)).arrayBuffer());
  return [...b].map(x => x.toString(16).padStart(2, '0')).join('');
})()`, save), chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.Equal(t, hex.EncodeToString(notes), saved, "the file saved is the file uploaded")
	d.screenshots("attachments", map[string]context.Context{"alice": alice, "bob": bob})

	// The object URLs bob's page holds, to check that they are revoked.
	urls, err := chromedp.Run(bob, chromedp.Evaluate[[]string](fmt.Sprintf(`[%s.src, %s.href]`, thumb, save)))
	require.NoError(t, err)
	require.Len(t, urls, 2)
	fetched := func(ctx context.Context, url string) string {
		t.Helper()
		out, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(
			`fetch(%q).then(r => r.text()).then(() => 'fetched', () => 'revoked')`, url), chromedp.EvalAwaitPromise))
		require.NoError(t, err)
		return out
	}
	for _, u := range urls {
		require.Equal(t, "fetched", fetched(bob, u), "%s while shown", u)
	}

	seqOf := func(ctx context.Context, name string) int {
		t.Helper()
		seq, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Number(`+row(name)+`.dataset.seq)`))
		require.NoError(t, err)
		require.Positive(t, seq)
		return seq
	}
	for _, name := range []string{"dot.png", "notes.txt"} {
		msg := fmt.Sprintf(`#messages .msg[data-seq="%d"]`, seqOf(alice, name))
		gone := fmt.Sprintf(`document.querySelector(%q)?.classList.contains('deleted') && !document.querySelector(%q)`, msg, msg+" .attachment")
		d.do(alice, "delete the message of "+name, press(msg+" button.delete"), until(gone))
		d.do(bob, "see the attachment of "+name+" go", until(gone))
	}
	d.do(bob, "no attachment is left", until(`!document.querySelector('#messages .attachment')`))
	for _, u := range urls {
		require.Equal(t, "revoked", fetched(bob, u), "%s once its message was deleted", u)
	}
	// Those fetches failed on purpose: they are not files of the page that
	// did not load. The console reports them a moment later.
	waitFor(t, 10*time.Second, "the console's report of the revoked URLs", func() bool {
		d.consoleMu.Lock()
		defer d.consoleMu.Unlock()
		n := 0
		for _, line := range d.unloaded {
			for _, u := range urls {
				if strings.Contains(line, "("+u+")") {
					n++
				}
			}
		}
		return n == len(urls)
	})
	d.consoleMu.Lock()
	kept := d.unloaded[:0]
	for _, line := range d.unloaded {
		if !strings.Contains(line, "(blob:") {
			kept = append(kept, line)
		}
	}
	d.unloaded = kept
	d.consoleMu.Unlock()
}

// testPNG is a w×h PNG of a few colour bands.
func testPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	bands := []color.RGBA{{200, 40, 40, 255}, {40, 160, 60, 255}, {40, 80, 200, 255}}
	for y := range h {
		for x := range w {
			img.Set(x, y, bands[x*len(bands)/w])
		}
	}
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, img))
	return buf.Bytes()
}

// humanSize is the demo's humanSize (web/static/files.js) for sizes below
// a MiB: what its attachments show.
func humanSize(n int) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n) / 1024
	if v < 10 {
		return fmt.Sprintf("%.1f KiB", v)
	}
	return fmt.Sprintf("%d KiB", int(math.Round(v)))
}
