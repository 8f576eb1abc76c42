package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
)

// waitSends waits until r's client finished every send in msgIDs.
func waitSends(t testing.TB, r *running, msgIDs []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, id := range msgIDs {
		_, err := r.c.WaitSent(ctx, id)
		require.NoError(t, err, "send %s", id)
	}
}

// converge waits until user's client finished every send in msgIDs and has
// delivered up to the server's head. Sends of other clients must be
// finished first (waitSends), or the head may still move.
func converge(t testing.TB, w *world, user int64, r *running, msgIDs []string) {
	t.Helper()
	waitSends(t, r, msgIDs)
	w.env.WaitCaughtUp(t, 60*time.Second)
	head := w.head(t, user)
	waitFor(t, 60*time.Second, fmt.Sprintf("user %d's client at head %d", user, head), func() bool {
		if err, ended := r.ended(); ended {
			t.Fatalf("Run of user %d ended: %v", user, err)
		}
		_, cursor := r.c.Position()
		return cursor >= head
	})
}

// requireSent checks that every send got exactly one message row, with the
// seq the client reported (WaitSent), and that the app was told once
// (OnSendResult, which may run just after WaitSent returned).
func requireSent(t testing.TB, w *world, a *app, msgIDs []string) {
	t.Helper()
	waitFor(t, 30*time.Second, "OnSendResult of every send", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, id := range msgIDs {
			if _, ok := a.results[id]; !ok {
				return false
			}
		}
		return true
	})
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range msgIDs {
		r := a.results[id]
		require.NoError(t, r.Err, "send %s", id)
		n, conv, seq := w.rowsOf(t, id)
		require.Equal(t, 1, n, "rows of msg_id %s", id)
		require.Equal(t, conv, r.ConversationID)
		require.Equal(t, seq, r.Message.Seq, "seq of msg_id %s", id)
	}
}

// TestLive: a client keeps up with live traffic and sends, over each
// transport, every entry once and in order.
func TestLive(t *testing.T) {
	for _, tr := range []client.Transport{client.TransportWebSocket, client.TransportPolling} {
		t.Run(tr.String(), func(t *testing.T) {
			noClientGoroutines(t)
			w := newWorld(t, nil, nil)
			ctx := context.Background()
			bob := w.direct(t, 2)
			cid, err := bob.CreateConversation(ctx, "live", 1)
			require.NoError(t, err)

			a := newApp()
			cfg := w.config(t, w.url, 1, a)
			cfg.Transport = tr
			c, err := client.New(cfg)
			require.NoError(t, err)
			r := start(t, c, a)

			var ids, bobs []string
			for i := 0; i < 5; i++ {
				id, err := bob.Send(ctx, cid, fmt.Sprintf("from bob %d", i))
				require.NoError(t, err)
				bobs = append(bobs, id)
				id, err = c.Send(ctx, cid, fmt.Sprintf("from alice %d", i))
				require.NoError(t, err)
				ids = append(ids, id)
			}
			// bob's client is not running: its sends sit in its outbox.
			require.Len(t, bob.Outbox(), 5)
			rb := start(t, bob, newApp())
			waitSends(t, rb, bobs)
			converge(t, w, 1, r, ids)
			requireExactlyOnce(t, w, 1, a.snapshot())
			requireSent(t, w, a, ids)
			require.NoError(t, r.stop())
		})
	}
}
