package notifier_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/notifier"
)

// Who is notified: offline members get one notification per
// message (or one per burst, standing for its messages), connected, muted
// and opted-out members none, the sender none; a mention reaches a member
// who muted the conversation.
func TestWhoIsNotified(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	// 1 sends; 2 is offline; 3 is connected; 4 muted; 5 muted, mentioned
	// once; 6 turned notifications off.
	cid := w.create(t, 1, 2, 3, 4, 5, 6)
	w.call(t, 4, "PATCH", fmt.Sprintf("/v1/conversations/%d/record", cid), map[string]any{"muted": true}, nil)
	w.call(t, 5, "PATCH", fmt.Sprintf("/v1/conversations/%d/record", cid), map[string]any{"muted": true}, nil)
	_, err := w.env.Pool.Exec(ctx, `INSERT INTO user_settings (user_id, notifications) VALUES (6, false)`)
	require.NoError(t, err)
	w.connect(t, 3)
	w.run(t, nil)

	seqs := []int64{w.send(t, 1, cid, "one")}
	time.Sleep(500 * time.Millisecond) // past the delay: a burst of its own
	seqs = append(seqs, w.send(t, 1, cid, "two, @5", 5))
	for i := range 5 { // a burst: one notification for its messages
		seqs = append(seqs, w.send(t, 1, cid, fmt.Sprintf("burst %d", i)))
	}
	waitFor(t, 30*time.Second, "user 2's notifications", func() bool {
		return covered(t, w.rcv.taken()[2], cid) == len(seqs)
	})
	waitFor(t, 30*time.Second, "user 5's mention", func() bool { return len(w.rcv.taken()[5]) == 1 })
	time.Sleep(time.Second) // anything more would come by now
	got := w.rcv.taken()
	require.Zero(t, w.rcv.bad)
	two := got[2]
	require.Equal(t, len(seqs), covered(t, two, cid), "every message once: %+v", two)
	require.LessOrEqual(t, len(two), 4, "the burst collapsed: %+v", two)
	require.Equal(t, seqs[0], two[0].Seq)
	require.Equal(t, "one", two[0].Preview)
	require.Equal(t, notifier.ReasonMessage, two[0].Reason)
	require.Positive(t, two[0].InboxSeq)
	require.Equal(t, int64(1), two[0].SenderID)
	last := two[len(two)-1]
	require.Equal(t, seqs[len(seqs)-1], last.Seq)
	require.Equal(t, int64(len(seqs)), last.Badge, "the badge is the member's unread total")
	for _, u := range []int64{1, 3, 4, 6} {
		require.Empty(t, got[u], "user %d", u)
	}
	require.Equal(t, seqs[1], got[5][0].Seq)
	require.Equal(t, notifier.ReasonMention, got[5][0].Reason)
	require.Equal(t, 1, got[5][0].Count)

	skipped := w.sum(t, `SELECT count(*) FROM notifications WHERE user_id = 3 AND state = 'skipped'`)
	require.Positive(t, skipped, "the connected member's notifications were skipped at their due time")
}

// A failing receiver: one that answers 500 and 429 (with
// Retry-After) for a while loses nothing, and nothing is taken twice.
func TestReceiverFailing(t *testing.T) {
	w := newWorld(t)
	w.rcv.fail = func(n int) (int, string) {
		switch {
		case n < 3:
			return http.StatusInternalServerError, ""
		case n < 5:
			return http.StatusTooManyRequests, "1"
		}
		return 0, ""
	}
	cid := w.create(t, 1, 2, 3)
	w.run(t, func(c *notifier.Config) { c.Workers = 2 })
	var seqs []int64
	for i := range 6 {
		seqs = append(seqs, w.send(t, 1, cid, fmt.Sprintf("m%d", i)))
		time.Sleep(400 * time.Millisecond)
	}
	for _, u := range []int64{2, 3} {
		waitFor(t, 60*time.Second, fmt.Sprintf("user %d's notifications", u), func() bool {
			return covered(t, w.rcv.taken()[u], cid) == len(seqs)
		})
	}
	dead := w.sum(t, `SELECT count(*) FROM notifications WHERE state = 'dead'`)
	require.Zero(t, dead)
	require.Zero(t, w.rcv.bad)
}

// A member who blocks the sender is not notified of its messages, not even
// of a mention; a member who does not (the control) is.
func TestBlockedSenderNotNotified(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	cid := w.create(t, 1, 2, 3)
	w.call(t, 2, "PUT", "/v1/blocks/1", nil, nil)
	waitFor(t, 30*time.Second, "the block projected", func() bool {
		var n int64
		require.NoError(t, w.env.UserPool(2).QueryRow(ctx, `SELECT count(*) FROM blocks WHERE blocker_id = 2 AND blocked_id = 1`).Scan(&n))
		return n == 1
	})
	w.run(t, nil)
	seq := w.send(t, 1, cid, "hi @2 @3", 2, 3)
	waitFor(t, 30*time.Second, "user 3's notification", func() bool { return covered(t, w.rcv.taken()[3], cid) == 1 })
	time.Sleep(time.Second) // anything for user 2 would come by now
	got := w.rcv.taken()
	require.Equal(t, seq, got[3][0].Seq)
	require.Empty(t, got[2], "the member who blocks the sender")
	require.Zero(t, w.sum(t, `SELECT count(*) FROM notifications WHERE user_id = 2`), "nothing queued for it")
}
