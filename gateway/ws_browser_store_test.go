package gateway

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// storeContract is the store contract of the TypeScript SDK's
// (clients/typescript/test/unit/store.test.ts), run on IndexedDBStore in
// Chromium through the committed bundle: nothing before the first save;
// the state as saved after a reopen (a copy: changing the object after the
// save changes nothing); the last of many saves wins; two databases do not
// mix; a record of another shape is an error on load, never a reset.
const storeContract = `(async () => {
  const { IndexedDBStore, emptyState } = await import('/demo/inboxd-client.js');
  const name = 'contract-' + Math.random();
  const r = {};
  let s = await IndexedDBStore.open(name);
  r.emptyAtFirst = (await s.load()) === undefined;
  const st = emptyState();
  st.epoch = 2; st.cursor = 7; st.recordVersion = 3;
  st.conversations['5'] = { lastSeq: 9, recordVersion: 3, holes: [{ from: 1, to: 4 }], stale: [{ from: 5, to: 6 }], versions: { '6': 2 } };
  st.outbox.push({ msgId: 'm-1', conversationId: 5, body: 'offline', replyTo: 2, mentions: [3], queuedAt: 1 });
  await s.save(st);
  st.cursor = 1000;
  await s.close();
  s = await IndexedDBStore.open(name);
  const got = await s.load();
  r.reopened = JSON.parse(JSON.stringify(got));
  for (let i = 1; i <= 50; i++) { got.cursor = 7 + i; await s.save(got); }
  r.lastCursor = (await s.load()).cursor;
  const other = await IndexedDBStore.open(name + '-other');
  r.otherEmpty = (await other.load()) === undefined;
  await other.close();
  await s.close();
  await new Promise((ok, fail) => {
    const req = indexedDB.open(name, 1);
    req.onsuccess = () => {
      const tx = req.result.transaction('state', 'readwrite');
      tx.objectStore('state').put({ version: 9, something: 'else' }, 'client');
      tx.oncomplete = () => { req.result.close(); ok(); };
      tx.onerror = () => fail(tx.error);
    };
    req.onerror = () => fail(req.error);
  });
  s = await IndexedDBStore.open(name);
  r.badShape = await s.load().then(() => 'loaded', (e) => String(e.message));
  await s.close();
  return JSON.stringify(r);
})()`

// TestWSBrowserIndexedDBStore runs storeContract in a Chromium page of the
// demo (same origin as the bundle).
func TestWSBrowserIndexedDBStore(t *testing.T) {
	d := newDemo(t)
	tab := d.tab("store")
	d.do(tab, "open the demo", chromedp.Navigate(d.url+"/"), chromedp.WaitVisible("#user-id"))
	ctx, cancel := context.WithTimeout(tab, time.Minute)
	defer cancel()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](storeContract, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	var r struct {
		EmptyAtFirst bool `json:"emptyAtFirst"`
		Reopened     struct {
			Conversations map[string]json.RawMessage `json:"conversations"`
			Outbox        []map[string]any           `json:"outbox"`
		} `json:"reopened"`
		LastCursor int    `json:"lastCursor"`
		OtherEmpty bool   `json:"otherEmpty"`
		BadShape   string `json:"badShape"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	require.True(t, r.EmptyAtFirst, out)
	require.Contains(t, out, `"reopened":{"version":1,"epoch":2,"cursor":7,"recordVersion":3`, "the state as saved, not as changed after")
	require.JSONEq(t, `{"lastSeq":9,"recordVersion":3,"holes":[{"from":1,"to":4}],"stale":[{"from":5,"to":6}],"versions":{"6":2}}`,
		string(r.Reopened.Conversations["5"]))
	require.Equal(t, []map[string]any{{"msgId": "m-1", "conversationId": 5.0, "body": "offline", "replyTo": 2.0,
		"mentions": []any{3.0}, "queuedAt": 1.0}}, r.Reopened.Outbox)
	require.Equal(t, 57, r.LastCursor, "the last save wins")
	require.True(t, r.OtherEmpty, "databases do not mix")
	require.Contains(t, r.BadShape, "unknown shape", "another shape is an error, not a reset")
}
