package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestWSBrowserReloadOffline: the demo on the TypeScript SDK keeps working
// offline across a reload. User 2's page is cut off the gateway at the
// network level (every /v1/ request, the
// WebSocket included, fails as if the network were down; the page's own
// files still load); user 2 sends two messages, shown as pending, and
// reloads: the conversation list, what was shown and the two pending
// messages come back from IndexedDB (the SDK's outbox, the page's copy of
// its view). Meanwhile user 1 sends two. Back online, user 2's messages
// are delivered exactly once (user 1's page and the history over HTTP show
// each once) and user 2 catches up with user 1's.
func TestWSBrowserReloadOffline(t *testing.T) {
	d := newDemo(t)
	alice, bob := d.tab("alice"), d.tab("bob")
	d.login(alice, 1)
	d.login(bob, 2)
	d.converse(alice, bob, "offline", 2)
	d.say(alice, "hello bob")
	d.do(bob, "see it", until(confirmed("hello bob")), until(readToEnd))
	cid, err := chromedp.Run(bob, chromedp.Evaluate[string](`document.querySelector('#convs li.current').dataset.cid`))
	require.NoError(t, err)

	d.network(bob, false)
	d.do(bob, "lose the connection", until(`document.querySelector('#status').textContent !== 'online'`))
	for _, text := range []string{"offline 1", "offline 2"} {
		d.do(bob, "send offline: "+text,
			chromedp.SendKeys("#compose", text),
			chromedp.Click("#send-btn"),
			until(pendingShown(text)),
		)
	}
	d.say(alice, "while away 1")
	d.say(alice, "while away 2")

	d.do(bob, "reload offline: the view and the outbox come back from IndexedDB",
		chromedp.Reload(),
		// The page could not read the list: it is offline for real.
		until(`[...document.querySelectorAll('#log li')].some(li => li.textContent.includes(' list: '))`),
		until(`document.querySelector('#status').textContent !== 'online'`),
		until(`[...document.querySelectorAll('#convs li .title')].some(e => e.textContent.startsWith('offline'))`),
		until(`document.querySelector('#view-title').textContent === 'offline'`),
		until(confirmed("hello bob")+" && "+pendingShown("offline 1")+" && "+pendingShown("offline 2")),
		until(`document.querySelector('#outbox').textContent === '2'`),
	)
	missed, err := chromedp.Run(bob, chromedp.Evaluate[bool](has("while away 1")))
	require.NoError(t, err)
	require.False(t, missed, "bob is offline")
	d.screenshots("reload-offline", map[string]context.Context{"bob": bob})

	d.network(bob, true)
	once := func(text string) string {
		return fmt.Sprintf(`[...document.querySelectorAll('#messages .msg .body')].filter(e => e.textContent === %q).length === 1`, text)
	}
	d.do(bob, "back online: sent, and caught up",
		until(`['online', 'polling'].includes(document.querySelector('#status').textContent)`),
		until(confirmed("offline 1")+" && "+confirmed("offline 2")+" && "+confirmed("while away 1")+" && "+confirmed("while away 2")),
		until(`!document.querySelector('#messages .msg.pending') && document.querySelector('#outbox').textContent === '0'`),
	)
	d.do(alice, "see bob's two messages once each",
		until(confirmed("offline 1")+" && "+confirmed("offline 2")),
		until(once("offline 1")+" && "+once("offline 2")),
	)
	d.do(bob, "each message once", until(once("offline 1")+" && "+once("offline 2")+" && "+once("while away 1")+" && "+once("while away 2")))

	bodies := d.history(1, cid)
	for _, text := range []string{"hello bob", "offline 1", "offline 2", "while away 1", "while away 2"} {
		require.Equal(t, 1, bodies[text], "%q in the history", text)
	}
	d.screenshots("back-online", map[string]context.Context{"alice": alice, "bob": bob})
}

// pendingShown: a message with this text is shown as pending (no seq yet).
func pendingShown(text string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#messages .msg.pending:not([data-seq])')].some(e => e.querySelector('.body').textContent === %q)`, text)
}

// network cuts the tab off the gateway's API (up false) or lets it through
// again: every request to /v1/, the WebSocket's included, fails as if the
// network were down, while the page's own files still load.
func (d *demo) network(ctx context.Context, up bool) {
	d.t.Helper()
	_, err := chromedp.Call(ctx, network.Enable, network.EnableParams{})
	require.NoError(d.t, err)
	rules := []*network.Conditions{}
	if !up {
		rules = append(rules, &network.Conditions{URLPattern: "*://*:*/v1/*", Offline: true, DownloadThroughput: -1, UploadThroughput: -1})
	}
	_, err = chromedp.Call(ctx, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{MatchedNetworkConditions: rules})
	require.NoError(d.t, err)
}

// history counts the text bodies of a conversation's newest 100 messages,
// read over HTTP as user (a dev token).
func (d *demo) history(user int, cid string) map[string]int {
	d.t.Helper()
	req, err := json.Marshal(map[string]int{"user_id": user})
	require.NoError(d.t, err)
	res, err := http.Post(d.url+"/v1/dev/token", "application/json", bytes.NewReader(req))
	require.NoError(d.t, err)
	var tok struct{ Token string }
	require.NoError(d.t, json.NewDecoder(res.Body).Decode(&tok))
	res.Body.Close()
	require.Less(d.t, res.StatusCode, 300)

	get, err := http.NewRequest(http.MethodGet, d.url+"/v1/conversations/"+cid+"/messages?limit=100", nil)
	require.NoError(d.t, err)
	get.Header.Set("Authorization", "Bearer "+tok.Token)
	res, err = http.DefaultClient.Do(get)
	require.NoError(d.t, err)
	defer res.Body.Close()
	require.Equal(d.t, http.StatusOK, res.StatusCode)
	var page struct {
		Messages []struct {
			Kind string          `json:"kind"`
			Body json.RawMessage `json:"body"`
		} `json:"messages"`
	}
	require.NoError(d.t, json.NewDecoder(res.Body).Decode(&page))
	bodies := map[string]int{}
	for _, m := range page.Messages {
		var s string
		if m.Kind == "text" && json.Unmarshal(m.Body, &s) == nil {
			bodies[s]++
		}
	}
	d.t.Logf("history of %s as user %d: %d messages", cid, user, len(page.Messages))
	return bodies
}
