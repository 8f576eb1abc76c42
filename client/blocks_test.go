package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
)

// TestBlocks: a user blocks another through the client and lists it; the
// blocked user's message is left out of the handlers and History by
// default (the cursor moves past it), handed marked and empty with
// ShowBlocked, and seen whole by a third member; unblocking empties the
// list and History shows the message again.
func TestBlocks(t *testing.T) {
	w := newWorld(t, nil, nil)
	ctx := context.Background()
	b := w.direct(t, 1)
	cid, err := b.CreateConversation(ctx, "blocks", 2, 3)
	require.NoError(t, err)
	require.NoError(t, b.BlockUser(ctx, 2))
	require.NoError(t, b.BlockUser(ctx, 2), "again: nothing changes")
	waitFor(t, 30*time.Second, "the block listed", func() bool {
		bs, err := b.Blocks(ctx)
		require.NoError(t, err)
		return len(bs) == 1 && bs[0].UserID == 2
	})

	texts := func(a *app) (out []string) {
		for _, e := range a.snapshot() {
			if e.Kind == client.KindMessage && e.Message.Kind == "text" {
				s := string(e.Message.Body)
				if e.Message.SenderBlocked {
					s = "blocked:" + s
				}
				out = append(out, s)
			}
		}
		return out
	}
	hiding, showing, other := newApp(), newApp(), newApp()
	run := func(user int64, a *app, show bool) *running {
		cfg := w.config(t, w.url, user, a)
		cfg.ShowBlocked = show
		c, err := client.New(cfg)
		require.NoError(t, err)
		return start(t, c, a)
	}
	rh, rs := run(1, hiding, false), run(1, showing, true)
	run(3, other, false)
	rx := run(2, newApp(), false)

	id, err := rx.c.SendWith(ctx, cid, "secret", client.SendOptions{})
	require.NoError(t, err)
	_, err = rx.c.WaitSent(ctx, id)
	require.NoError(t, err)
	id, err = rh.c.SendWith(ctx, cid, "after", client.SendOptions{}) // the control: B's own next message
	require.NoError(t, err)
	_, err = rh.c.WaitSent(ctx, id)
	require.NoError(t, err)
	head := w.head(t, 1)
	waitFor(t, 30*time.Second, "every client at the head", func() bool {
		_, c1 := rh.c.Position()
		_, c2 := rs.c.Position()
		return c1 >= head && c2 >= head && len(texts(other)) == 2
	})
	require.Equal(t, []string{`"after"`}, texts(hiding), "left out by default")
	require.Equal(t, []string{`blocked:""`, `"after"`}, texts(showing), "marked and empty with ShowBlocked")
	require.Equal(t, []string{`"secret"`, `"after"`}, texts(other), "whole for another member")

	hist, _, err := b.History(ctx, cid, 0, 10)
	require.NoError(t, err)
	for _, m := range hist {
		require.False(t, m.SenderBlocked, "History leaves blocked messages out")
	}
	require.NoError(t, b.UnblockUser(ctx, 2))
	waitFor(t, 30*time.Second, "the block lifted", func() bool {
		bs, err := b.Blocks(ctx)
		require.NoError(t, err)
		return len(bs) == 0
	})
	waitFor(t, 30*time.Second, "History shows the message again", func() bool {
		hist, _, err := b.History(ctx, cid, 0, 10)
		require.NoError(t, err)
		for _, m := range hist {
			if string(m.Body) == `"secret"` {
				return true
			}
		}
		return false
	})
}
