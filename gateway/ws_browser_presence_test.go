package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestWSBrowserPresence is issue 18's acceptance for the demo, two users in
// two windows of headless Chromium: each shows the other online in the
// open conversation's members; what user 1 types shows as "user 1 is
// typing…" in user 2's window, gone when 1 leaves the composer; a message
// to 2 while 2 has another conversation open is an unread badge of 1 on
// its list entry and a total of 1 in the header, both 0 once 2 opens it,
// and that read shows as "seen by 2" under the message in 1's window; when
// 2's page closes, 1's dot for 2 goes offline after the presence grace.
func TestWSBrowserPresence(t *testing.T) {
	start := time.Now()
	d := newDemoWith(t, func(c *Config) {
		c.Ephemeral = EphemeralConfig{PresenceGrace: testGrace, PresenceExpiry: testExpiry}
	})
	alice, bob := d.tab("alice"), d.tab("bob")
	d.login(alice, 1)
	d.login(bob, 2)
	d.converse(alice, bob, "presence", 2)

	dot := func(user int, state string) string {
		return fmt.Sprintf(`document.querySelector('#members .member[data-user="%d"] .dot')?.classList.contains(%q)`, user, state)
	}
	d.do(alice, "see bob online", until(dot(2, "online")+" && "+dot(1, "online")))
	d.do(bob, "see alice online", until(dot(1, "online")+" && "+dot(2, "online")))

	// Typing: a start on the first key, a stop when the composer loses focus.
	typing := `(document.querySelector('#typing').hidden ? '' : document.querySelector('#typing').textContent)`
	d.do(alice, "type", chromedp.SendKeys("#compose", "hel"))
	d.do(bob, "see alice typing", until(typing+" === 'user 1 is typing…'"))
	d.do(alice, "leave the composer", chromedp.Evaluate[chromedp.Void](`document.querySelector('#compose').blur()`))
	d.do(bob, "see alice stop", until(typing+" === ''"))

	// Bob opens a conversation of his own; alice's message to him then
	// counts as unread.
	d.do(bob, "open another conversation",
		chromedp.SendKeys("#new-title", "notes"),
		chromedp.Click("#create-btn"),
		until(`document.querySelector('#view-title').textContent === 'notes'`),
	)
	badge := func(title string) string {
		return fmt.Sprintf(`([...document.querySelectorAll('#convs li')].find(li => li.querySelector('.title').firstChild.textContent === %q)?.querySelector('.unread')?.textContent ?? '')`, title)
	}
	total := `document.querySelector('#unread-total').textContent`
	d.do(bob, "nothing unread yet", until(badge("presence")+" === '' && "+total+" === '0'"))
	d.do(alice, "finish and send", chromedp.SendKeys("#compose", "lo"), chromedp.Click("#send-btn"), until(confirmed("hello")))
	d.do(bob, "see the badge and the total",
		until(badge("presence")+" === '1' && "+total+" === '1'"))

	seen := `(document.querySelector('#messages .msg.mine .seen')?.textContent ?? '')`
	notSeen, err := chromedp.Run(alice, chromedp.Evaluate[string](seen))
	require.NoError(t, err)
	require.Empty(t, notSeen, "bob has not read it")

	cid, err := chromedp.Run(bob, chromedp.Evaluate[string](
		`[...document.querySelectorAll('#convs li')].find(li => li.querySelector('.title').firstChild.textContent === 'presence').dataset.cid`))
	require.NoError(t, err)
	d.do(bob, "open the conversation: read",
		chromedp.Click(fmt.Sprintf(`#convs li[data-cid=%q]`, cid)),
		until(`document.querySelector('#view-title').textContent === 'presence'`),
		until(confirmed("hello")),
		until(badge("presence")+" === '' && "+total+" === '0'"),
	)
	d.do(alice, "see it seen by bob",
		until(seen+" === 'seen by 2' && "+
			`document.querySelector('#messages .msg.mine .seen').closest('.msg').querySelector('.body').textContent === 'hello'`))
	d.screenshots("presence", map[string]context.Context{"alice": alice, "bob": bob})

	// A reload of bob's page: his record came with the list, no badge.
	d.do(bob, "reload",
		chromedp.Reload(),
		until(`document.querySelector('#status').textContent === 'online'`),
		until(fmt.Sprintf(`document.querySelectorAll('#convs li').length === 2 && %s === '' && %s === '0'`, badge("presence"), total)),
	)

	// Bob leaves: offline for alice after the grace.
	d.do(alice, "bob still online", until(dot(2, "online")))
	require.NoError(t, chromedp.Cancel(bob))
	closed := time.Now()
	d.do(alice, "see bob offline", until(dot(2, "offline")))
	t.Logf("offline %v after the page closed (grace %v); the test took %v",
		time.Since(closed).Round(time.Millisecond), testGrace, time.Since(start).Round(time.Millisecond))
}
