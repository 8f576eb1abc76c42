package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestWSBrowserPresence: counts, receipts, typing and presence in the
// demo, two users in two windows of headless Chromium: each shows the other online in the
// open conversation's members; what user 1 types shows as "user 1 is
// typing…" in user 2's window, gone when 1 leaves the composer. While 2 has
// another conversation open, a message from 1 is an unread badge of 1 on
// its list entry and a total of 1 in the header, a second one mentioning 2
// adds an @ and a mention total; opening the conversation reads it (all
// back to 0, also after a reload), which shows as "seen by 2" under the
// newest message in 1's window. When 2's page closes, 1's dot for 2 goes
// offline after the presence grace.
func TestWSBrowserPresence(t *testing.T) {
	start := time.Now()
	d := newDemoWith(t, func(c *Config) {
		c.Ephemeral = EphemeralConfig{PresenceGrace: testGrace, PresenceExpiry: testExpiry}
	})
	alice, bob := d.tab("alice"), d.tab("bob")
	d.login(alice, 1)
	d.login(bob, 2)
	d.converse(alice, bob, "presence", 2)

	d.do(alice, "see bob online", until(dotIs(2, "online")+" && "+dotIs(1, "online")))
	d.do(bob, "see alice online", until(dotIs(1, "online")+" && "+dotIs(2, "online")))

	// Typing: a start on the first key, a stop when the composer loses focus.
	d.do(alice, "type", chromedp.SendKeys("#compose", "hel"))
	d.do(bob, "see alice typing", until(typingText+" === 'user 1 is typing…'"))
	d.do(alice, "leave the composer", chromedp.Evaluate[chromedp.Void](`document.querySelector('#compose').blur()`))
	d.do(bob, "see alice stop", until(typingText+" === ''"))

	unreadWhileAway(t, d, alice, bob)

	// A reload of bob's page: his record came with the list, no badge.
	d.do(bob, "reload",
		chromedp.Reload(),
		until(`document.querySelector('#status').textContent === 'online'`),
		until(fmt.Sprintf(`document.querySelectorAll('#convs li').length === 2 && %s === '' && %s === '0'`, badgeOf("presence"), unreadTotal)),
	)

	// Bob leaves: offline for alice after the grace.
	d.do(alice, "bob still online", until(dotIs(2, "online")))
	require.NoError(t, chromedp.Cancel(bob))
	closed := time.Now()
	d.do(alice, "see bob offline", until(dotIs(2, "offline")))
	t.Logf("offline %v after the tab's close returned (grace %v); the test took %v",
		time.Since(closed).Round(time.Millisecond), testGrace, time.Since(start).Round(time.Millisecond))
}

// JavaScript expressions for the demo's state.
const (
	typingText   = `(document.querySelector('#typing').hidden ? '' : document.querySelector('#typing').textContent)`
	unreadTotal  = `document.querySelector('#unread-total').textContent`
	mentionTotal = `document.querySelector('#mention-total').textContent`
	seenText     = `(document.querySelector('#messages .msg.mine .seen')?.textContent ?? '')`
)

// dotIs: the open conversation's member list shows user's dot in state
// (online or offline).
func dotIs(user int, state string) string {
	return fmt.Sprintf(`document.querySelector('#members .member[data-user="%d"] .dot')?.classList.contains(%q)`, user, state)
}

// convNamed is the list entry of the conversation titled title.
func convNamed(title string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#convs li')].find(li => li.querySelector('.title').firstChild.textContent === %q)`, title)
}

// badgeOf is the unread badge of the conversation titled title, ” if none.
func badgeOf(title string) string {
	return fmt.Sprintf(`(%s?.querySelector('.unread')?.textContent ?? '')`, convNamed(title))
}

// unreadWhileAway: bob opens a conversation of his own; alice's messages to
// him in "presence" count as unread (one mentions him), until he opens it,
// which alice sees as "seen by 2".
func unreadWhileAway(t *testing.T, d *demo, alice, bob context.Context) {
	t.Helper()
	d.do(bob, "open another conversation",
		chromedp.SendKeys("#new-title", "notes"),
		chromedp.Click("#create-btn"),
		until(`document.querySelector('#view-title').textContent === 'notes'`),
	)
	d.do(bob, "nothing unread yet", until(badgeOf("presence")+" === '' && "+unreadTotal+" === '0' && "+mentionTotal+" === ''"))
	d.do(alice, "finish and send", chromedp.SendKeys("#compose", "lo"), chromedp.Click("#send-btn"), until(confirmed("hello")))
	d.do(bob, "see the badge and the total",
		until(badgeOf("presence")+" === '1' && "+unreadTotal+" === '1' && "+mentionTotal+" === ''"))
	d.do(alice, "mention bob", chromedp.SendKeys("#compose", "@2 look"), chromedp.Click("#send-btn"), until(confirmed("@2 look")))
	d.do(bob, "see the @ marker and both totals",
		until(badgeOf("presence")+" === '@2' && "+unreadTotal+" === '2' && "+mentionTotal+" === '@1'"))

	notSeen, err := chromedp.Run(alice, chromedp.Evaluate[string](seenText))
	require.NoError(t, err)
	require.Empty(t, notSeen, "bob has not read it")

	cid, err := chromedp.Run(bob, chromedp.Evaluate[string](convNamed("presence")+".dataset.cid"))
	require.NoError(t, err)
	d.do(bob, "open the conversation: read",
		press(fmt.Sprintf(`#convs li[data-cid=%q]`, cid)),
		until(`document.querySelector('#view-title').textContent === 'presence'`),
		until(confirmed("hello")+" && "+confirmed("@2 look")),
		until(`document.querySelector('#messages .msg.mentioned .body')?.textContent === '@2 look'`),
		until(badgeOf("presence")+" === '' && "+unreadTotal+" === '0' && "+mentionTotal+" === ''"),
		until(readToEnd),
	)
	d.do(alice, "see the newest seen by bob",
		until(seenText+" === 'seen by 2' && "+
			`document.querySelector('#messages .msg.mine .seen').closest('.msg').querySelector('.body').textContent === '@2 look' && `+
			`document.querySelectorAll('#messages .seen').length === 1`))
	d.screenshots("presence", map[string]context.Context{"alice": alice, "bob": bob})
}
