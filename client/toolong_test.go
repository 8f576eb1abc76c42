package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
)

// post sends n messages from user into cid straight to the gateway, from 8
// goroutines: bulk traffic for the tests, not through a client.
func (w *world) post(t testing.TB, user, cid int64, n int) {
	t.Helper()
	tok := w.token(t, user)
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	jobs := make(chan int)
	for k := 0; k < 8; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				body, _ := json.Marshal(map[string]string{"msg_id": uuid.NewString(), "body": fmt.Sprintf("bulk %d", i)})
				req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/v1/conversations/%d/messages", w.url, cid), bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set("Content-Type", "application/json")
				res, err := hc.Do(req)
				if err != nil {
					errs <- err
					continue
				}
				res.Body.Close()
				if res.StatusCode != http.StatusCreated {
					errs <- fmt.Errorf("post %d: status %d", i, res.StatusCode)
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// visibleSeqs are the seqs of every message of cid.
func (w *world) seqsOf(t testing.TB, cid int64) []int64 {
	t.Helper()
	rows, err := w.env.ConvPool(cid).Query(context.Background(), `SELECT seq FROM messages WHERE conversation_id = $1 ORDER BY seq`, cid)
	require.NoError(t, err)
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var s int64
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	return out
}

// messagesSeen is every message seq of cid the app got, through OnEntry
// and Backfill, failing on a duplicate.
func messagesSeen(t testing.TB, a *app, cid int64) []int64 {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := map[int64]string{}
	add := func(seq int64, how string) {
		if prev, dup := seen[seq]; dup {
			t.Fatalf("conversation %d seq %d delivered twice (%s, then %s)", cid, seq, prev, how)
		}
		seen[seq] = how
	}
	for _, e := range a.entries {
		if e.Kind == client.KindMessage && e.ConversationID == cid {
			add(e.Message.Seq, fmt.Sprintf("entry %d", e.InboxSeq))
		}
	}
	for _, m := range a.history[cid] {
		add(m.Seq, "backfill")
	}
	out := make([]int64, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// backfillAll calls Backfill until the conversation has no holes; it
// checks that what Backfill returns is what OnHistory got.
func backfillAll(t testing.TB, c *client.Client, a *app, cid int64) (calls int) {
	t.Helper()
	for {
		before := len(a.history[cid])
		res, err := c.Backfill(context.Background(), cid)
		require.NoError(t, err)
		calls++
		a.mu.Lock()
		got := a.history[cid][before:]
		a.mu.Unlock()
		require.Equal(t, len(got), len(res.Messages))
		for i := 1; i < len(res.Messages); i++ {
			require.Less(t, res.Messages[i-1].Seq, res.Messages[i].Seq, "backfill page ascending")
		}
		if len(res.Remaining) == 0 {
			return calls
		}
		require.Less(t, calls, 100, "backfill does not converge: %v", res.Remaining)
	}
}

// TestTooLongAndBackfill is acceptance 2: a client offline for more than
// the too-long lag (500 entries) recovers through too_long, keeps
// receiving live entries, and backfills the history of its conversations
// without a duplicate, while live messages arrive; a new device of the same
// user does the same from nothing.
func TestTooLongAndBackfill(t *testing.T) {
	for _, tr := range []client.Transport{client.TransportWebSocket, client.TransportPolling} {
		t.Run(tr.String(), func(t *testing.T) {
			noClientGoroutines(t)
			w := newWorld(t, nil, nil)
			ctx := context.Background()
			bob := w.direct(t, 2)
			convA, err := bob.CreateConversation(ctx, "A", 1)
			require.NoError(t, err)
			convB, err := bob.CreateConversation(ctx, "B", 1)
			require.NoError(t, err)
			w.post(t, 2, convA, 10)

			// Alice online: she gets everything so far.
			store := client.NewMemoryStore()
			a := newApp()
			cfg := w.config(t, w.url, 1, a)
			cfg.Transport = tr
			cfg.Store = store
			c, err := client.New(cfg)
			require.NoError(t, err)
			r := start(t, c, a)
			converge(t, w, 1, r, nil)
			require.NoError(t, r.stop())
			knownA := c.Conversation(convA).LastSeq
			require.Equal(t, int64(11), knownA) // the creation and 10 messages
			_, cursor := c.Position()

			// Offline while 600 messages arrive.
			w.post(t, 2, convA, 550)
			w.post(t, 2, convB, 50)
			w.env.WaitCaughtUp(t, 60*time.Second)
			require.Greater(t, w.head(t, 1)-cursor, int64(500))

			// Back: too_long, then live traffic and backfill at once.
			c2, err := client.New(cfg)
			require.NoError(t, err)
			r2 := start(t, c2, a)
			waitFor(t, 60*time.Second, "too_long", func() bool {
				a.mu.Lock()
				defer a.mu.Unlock()
				return len(a.tooLongs) == 1
			})
			a.mu.Lock()
			tl := a.tooLongs[0]
			a.mu.Unlock()
			require.Equal(t, cursor, tl.PreviousCursor)
			require.Equal(t, []client.Hole{{From: knownA + 1, To: 561}}, tl.NewHoles[convA])
			require.Equal(t, []client.Hole{{From: 2, To: 51}}, tl.NewHoles[convB])

			var live sync.WaitGroup
			live.Add(1)
			go func() {
				defer live.Done()
				w.post(t, 2, convA, 20)
			}()
			backfillAll(t, c2, a, convA)
			backfillAll(t, c2, a, convB)
			live.Wait()
			converge(t, w, 1, r2, nil)
			// Holes are closed after the live messages raced them too.
			backfillAll(t, c2, a, convA)
			require.Empty(t, c2.Holes())

			// Every message of A and B exactly once, across OnEntry and
			// Backfill; every entry after the jump once, in order.
			require.Equal(t, w.seqsOf(t, convA), messagesSeen(t, a, convA))
			require.Equal(t, w.seqsOf(t, convB), messagesSeen(t, a, convB))
			all := w.inbox(t, 1)
			got := a.snapshot()
			var afterJump []client.Entry
			for _, e := range got {
				if e.InboxSeq > tl.Head {
					afterJump = append(afterJump, e)
				}
			}
			var wantAfter int
			for _, e := range all {
				if e.inboxSeq > tl.Head {
					wantAfter++
				}
			}
			require.Len(t, afterJump, wantAfter)
			for i, e := range afterJump {
				require.Equal(t, tl.Head+int64(i)+1, e.InboxSeq)
			}
			require.NoError(t, r2.stop())

			// A new device of Alice: too_long from nothing, holes from seq 1.
			a3 := newApp()
			cfg3 := w.config(t, w.url, 1, a3)
			cfg3.Transport = tr
			c3, err := client.New(cfg3)
			require.NoError(t, err)
			r3 := start(t, c3, a3)
			converge(t, w, 1, r3, nil)
			a3.mu.Lock()
			require.Len(t, a3.tooLongs, 1)
			require.Equal(t, int64(1), a3.tooLongs[0].NewHoles[convB][0].From)
			a3.mu.Unlock()
			backfillAll(t, c3, a3, convB)
			require.Equal(t, w.seqsOf(t, convB), messagesSeen(t, a3, convB))
			require.NoError(t, r3.stop())
		})
	}
}
