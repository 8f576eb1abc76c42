package notifier_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
)

// Nothing repeated across crashes: notifier processes killed with SIGKILL while
// messages flow and while notifications are being delivered repeat
// nothing beyond what the idempotency key lets the receiver drop: once the
// receiver drops repeated ids, every offline member has every message
// exactly once (the notifications' ranges cover the seqs without overlap).
func TestNotifierKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("notifier processes")
	}
	w := newWorld(t)
	a := w.create(t, 1, 2, 3)
	b := w.create(t, 4, 2, 5)
	env := []string{"DATABASE_URL=" + w.env.DatabaseURL, "INBOXD_KAFKA_BROKERS=" + strings.Join(w.env.Brokers, ","),
		"INBOXD_TOPIC=" + w.env.Topic, "INBOXD_NOTIFIER_GROUP=notifier-" + w.env.Topic,
		"INBOXD_WEBHOOK_URL=" + w.rcv.srv.URL, "INBOXD_WEBHOOK_SECRET=" + string(webhookSecret),
		"INBOXD_NOTIFY_DELAY=200ms", "INBOXD_NOTIFY_PRESENCE_EXPIRY=3s", "INBOXD_LOG_LEVEL=warn"}
	// One process per server (one server: one process).
	start := func(server int) *testenv.Proc {
		return testenv.Start(t, append(env, fmt.Sprintf("INBOXD_HTTP_ADDR=127.0.0.1:%d", testenv.FreePort(t)),
			fmt.Sprintf("INBOXD_SHARD_SERVER=%d", server), fmt.Sprintf("INBOXD_NOTIFIER_INSTANCE_ID=notifier-%d", server)), "notifier")
	}
	procs := make([]*testenv.Proc, len(w.env.Pools))
	for i := range procs {
		procs[i] = start(i + 1)
	}
	// Sends count from when the notifiers stored where they start: before
	// that, a new notifier starts where the fanout is.
	waitFor(t, 60*time.Second, "the notifiers' start", func() bool {
		return w.sum(t, `SELECT count(*) FROM consumer_offsets c WHERE c.topic = $1 AND NOT EXISTS (
			SELECT 1 FROM notifier_offsets n WHERE n.topic = c.topic AND n."partition" = c."partition")`, w.env.Topic) == 0
	})

	var mu sync.Mutex
	seqs := map[int64]int{} // conversation -> messages sent
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 80 {
			cid, by := a, int64(1)
			if i%2 == 1 {
				cid, by = b, 4
			}
			w.send(t, by, cid, fmt.Sprintf("m%d", i))
			mu.Lock()
			seqs[cid]++
			mu.Unlock()
			time.Sleep(time.Duration(30+rand.IntN(60)) * time.Millisecond)
		}
	}()
	for range 4 {
		time.Sleep(time.Duration(400+rand.IntN(600)) * time.Millisecond)
		i := rand.IntN(len(procs))
		procs[i].Kill()
		procs[i] = start(i + 1)
	}
	<-done
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		rows, _ := w.env.ConvPool(a).Query(context.Background(), `SELECT user_id, conversation_id, first_seq, last_seq, count, state, attempts, coalesce(last_error,'') FROM notifications ORDER BY user_id, conversation_id, first_seq`)
		for rows.Next() {
			var u, c, f, l, n, at int64
			var st, e string
			_ = rows.Scan(&u, &c, &f, &l, &n, &st, &at, &e)
			t.Logf("row user %d conv %d %d..%d (%d) %s attempts %d %s", u, c, f, l, n, st, at, e)
		}
		rows.Close()
		rows, _ = w.env.Pool.Query(context.Background(), `SELECT 'n', "partition", next_offset FROM notifier_offsets UNION ALL SELECT 'f', "partition", next_offset FROM consumer_offsets ORDER BY 2, 1`)
		for rows.Next() {
			var k string
			var p, o int64
			_ = rows.Scan(&k, &p, &o)
			t.Logf("offsets %s partition %d: %d", k, p, o)
		}
		rows.Close()
		for i, p := range procs {
			t.Logf("output of server %d's: %s", i+1, p.Output())
		}
	})
	for _, c := range []struct{ user, cid int64 }{{2, a}, {3, a}, {2, b}, {5, b}} {
		want := seqs[c.cid]
		waitFor(t, 90*time.Second, fmt.Sprintf("user %d's notifications of %d", c.user, c.cid), func() bool {
			return covered(t, w.rcv.taken()[c.user], c.cid) == want
		})
	}
	time.Sleep(time.Second)
	for _, c := range []struct{ user, cid int64 }{{2, a}, {3, a}, {2, b}, {5, b}} {
		require.Equal(t, seqs[c.cid], covered(t, w.rcv.taken()[c.user], c.cid), "user %d conversation %d", c.user, c.cid)
	}
	w.rcv.mu.Lock()
	calls := len(w.rcv.calls)
	w.rcv.mu.Unlock()
	taken := 0
	for _, l := range w.rcv.taken() {
		taken += len(l)
	}
	t.Logf("%d messages, %d notifications taken, %d calls (repeats of an id: %d)", 80, taken, calls, calls-taken)
	require.Zero(t, w.rcv.bad)
}
