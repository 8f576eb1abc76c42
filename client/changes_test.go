package client_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
	"github.com/inboxd/inboxd/gateway"
)

// describe is what a user sees of a message, for comparing views.
func describe(m client.Message) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d v%d user %d %s %q", m.Seq, m.CurrentVersion(), m.SenderID, m.Kind, m.Text())
	if m.Deleted {
		b.WriteString(" deleted")
	}
	if m.EditedAt != nil {
		b.WriteString(" edited " + m.EditedAt.UTC().Format(time.RFC3339Nano))
	}
	if m.ReplyTo != 0 {
		fmt.Fprintf(&b, " reply to #%d", m.ReplyTo)
	}
	for _, r := range m.Reactions {
		fmt.Fprintf(&b, " [%s %d me=%v]", r.Emoji, r.Count, r.Me)
	}
	return b.String()
}

// viewOf is a device's view of a conversation, built from what its app
// was handed in order (OnEntry's messages, OnHistory, OnUpdate). It checks
// that no state goes back to an older version.
func viewOf(t testing.TB, a *app, cid int64) []string {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	view := map[int64]client.Message{}
	var maxSeq int64
	for _, m := range a.states {
		if m.ConversationID != cid {
			continue
		}
		if had, ok := view[m.Seq]; ok {
			require.Greater(t, m.CurrentVersion(), had.CurrentVersion(),
				"conversation %d #%d: handed %s after %s", cid, m.Seq, describe(m), describe(had))
		}
		view[m.Seq] = m
		maxSeq = max(maxSeq, m.Seq)
	}
	var out []string
	for s := int64(1); s <= maxSeq; s++ {
		if m, ok := view[s]; ok {
			out = append(out, describe(m))
		}
	}
	return out
}

// serverView is the conversation's history as user reads it now.
func serverView(t testing.TB, c *client.Client, cid int64) []string {
	t.Helper()
	var all []client.Message
	before := int64(0)
	for {
		msgs, more, err := c.History(context.Background(), cid, before, 200)
		require.NoError(t, err)
		all = append(msgs, all...)
		if !more || len(msgs) == 0 {
			break
		}
		before = msgs[0].Seq
	}
	out := make([]string, len(all))
	for i, m := range all {
		out[i] = describe(m)
	}
	return out
}

// changesWorld is a world for the tests of changes, with the gateway's
// message cache on (its default): an update entry must never be answered
// with a copy older than its change.
func changesWorld(t testing.TB, tweak func(*gateway.Config)) *world {
	return newWorld(t, tweak, nil)
}

// requireUpdatesAscending checks that OnUpdate got each message's versions
// in ascending order, none twice.
func requireUpdatesAscending(t testing.TB, a *app) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	last := map[[2]int64]int64{}
	for _, m := range a.updates {
		k := [2]int64{m.ConversationID, m.Seq}
		require.Greater(t, m.CurrentVersion(), last[k], "OnUpdate of %d #%d: version %d after %d",
			m.ConversationID, m.Seq, m.CurrentVersion(), last[k])
		last[k] = m.CurrentVersion()
	}
}

// sendAll sends texts from a running client and returns their seqs.
func sendAll(t testing.TB, r *running, cid int64, texts ...string) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var seqs []int64
	for _, text := range texts {
		id, err := r.c.Send(ctx, cid, text)
		require.NoError(t, err)
		res, err := r.c.WaitSent(ctx, id)
		require.NoError(t, err)
		require.NoError(t, res.Err)
		seqs = append(seqs, res.Message.Seq)
	}
	return seqs
}

// applied requires that a change applied and returns the message after it:
// applied(t)(c.Edit(…)).
func applied(t testing.TB) func(client.ChangeResult, error) client.Message {
	return func(res client.ChangeResult, err error) client.Message {
		t.Helper()
		require.NoError(t, err)
		require.False(t, res.Pending, "the gateway's ack wait is long in the tests")
		require.NotNil(t, res.Message)
		return *res.Message
	}
}

// TestChangesReachDevices: the edits, deletes, reactions and replies made
// on one device reach the user's other device and another member's through
// OnUpdate, each version once and in ascending order, also through a path
// that drops, duplicates and cuts WebSocket frames (replays of entries);
// every device's view ends equal to the history the server serves.
func TestChangesReachDevices(t *testing.T) {
	noClientGoroutines(t)
	w := changesWorld(t, nil)
	ctx := context.Background()
	const alice, bob = 1, 2

	aA, aB, bb := newApp(), newApp(), newApp()
	devA, err := client.New(w.config(t, w.url, alice, aA))
	require.NoError(t, err)
	p := newFaultProxy(t, w.url, 17)
	devB, err := client.New(w.config(t, p.url, alice, aB))
	require.NoError(t, err)
	bobDev, err := client.New(w.config(t, w.url, bob, bb))
	require.NoError(t, err)
	rA, rB, rBob := start(t, devA, aA), start(t, devB, aB), start(t, bobDev, bb)

	cid, err := bobDev.CreateConversation(ctx, "changes", alice)
	require.NoError(t, err)
	seqs := sendAll(t, rA, cid, "one", "two", "three")
	p.set(faults{WSDropP: 0.2, WSDupP: 0.3, WSKillP: 0.05, WSDelayMax: 5 * time.Millisecond})

	m := applied(t)(devA.Edit(ctx, cid, seqs[0], "one, edited"))
	require.Equal(t, "one, edited", m.Text())
	require.EqualValues(t, 2, m.Version)
	require.NotNil(t, m.EditedAt)
	m = applied(t)(devA.React(ctx, cid, seqs[0], "👍"))
	require.Equal(t, []client.Reaction{{Emoji: "👍", Count: 1, Me: true}}, m.Reactions)
	m = applied(t)(bobDev.React(ctx, cid, seqs[0], "👍"))
	require.Equal(t, []client.Reaction{{Emoji: "👍", Count: 2, Me: true}}, m.Reactions)
	applied(t)(devA.Edit(ctx, cid, seqs[0], "one, edited twice"))
	m = applied(t)(devA.Delete(ctx, cid, seqs[1]))
	require.True(t, m.Deleted)
	applied(t)(devA.React(ctx, cid, seqs[2], "👀"))
	m = applied(t)(devA.Unreact(ctx, cid, seqs[2]))
	require.Empty(t, m.Reactions)
	id, err := bobDev.SendReply(ctx, cid, seqs[0], "re: one")
	require.NoError(t, err)
	res, err := bobDev.WaitSent(ctx, id)
	require.NoError(t, err)
	require.NoError(t, res.Err)
	require.Equal(t, seqs[0], res.Message.ReplyTo)
	// Refusals are *APIErrors, not retried.
	_, err = bobDev.Edit(ctx, cid, seqs[0], "not mine")
	var ae *client.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, client.CodeForbidden, ae.Code)
	_, err = devA.React(ctx, cid, seqs[1], "👍")
	require.ErrorAs(t, err, &ae)
	require.Equal(t, 400, ae.Status, "no reaction to a deleted message")

	time.Sleep(300 * time.Millisecond) // some faults after the last change
	p.set(faults{})
	for _, r := range []*running{rA, rB} {
		converge(t, w, alice, r, nil)
	}
	converge(t, w, bob, rBob, nil)

	for name, dev := range map[string]struct {
		a *app
		c *client.Client
	}{"alice's device A": {aA, devA}, "alice's device B": {aB, devB}, "bob's device": {bb, bobDev}} {
		requireUpdatesAscending(t, dev.a)
		require.Equal(t, serverView(t, dev.c, cid), viewOf(t, dev.a, cid), name)
	}
	requireExactlyOnce(t, w, alice, aB.snapshot())
	for _, r := range []*running{rA, rB, rBob} {
		require.NoError(t, r.stop())
	}
}

// TestChangesWhileOffline: a device that comes back after edits, deletes,
// reactions and replies ends with the server's view, built from what it
// was handed: through sync (the update entries), and through too_long,
// whose jump skips the update entries of messages it had: Backfill reads
// them again and hands the changed ones to OnUpdate.
func TestChangesWhileOffline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lag     int64 // the gateway's too_long lag
		more    int   // messages sent while offline
		tooLong bool
	}{
		{name: "catch up", lag: 500, more: 3},
		{name: "too long", lag: 20, more: 30, tooLong: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noClientGoroutines(t)
			w := changesWorld(t, func(c *gateway.Config) { c.TooLongLag = tc.lag })
			ctx := context.Background()
			const alice, bob = 1, 2
			aliceC := w.direct(t, alice)
			ra := start(t, aliceC, newApp())
			bobOther := w.direct(t, bob) // bob's other device, for his own reactions
			cid, err := aliceC.CreateConversation(ctx, "offline", bob)
			require.NoError(t, err)
			old := sendAll(t, ra, cid, "m1", "m2", "m3", "m4", "m5", "m6")

			store := client.NewMemoryStore()
			a := newApp()
			cfg := w.config(t, w.url, bob, a)
			cfg.Store = store
			c, err := client.New(cfg)
			require.NoError(t, err)
			r := start(t, c, a)
			converge(t, w, bob, r, nil)
			applied(t)(aliceC.Edit(ctx, cid, old[5], "m6 seen edited")) // an update while online
			converge(t, w, bob, r, nil)
			require.NoError(t, r.stop())

			// Offline: changes of the messages bob's device has, a reply,
			// more messages, and changes of some of those.
			applied(t)(aliceC.Edit(ctx, cid, old[0], "m1 edited"))
			applied(t)(aliceC.Delete(ctx, cid, old[1]))
			applied(t)(aliceC.React(ctx, cid, old[2], "🎉"))
			applied(t)(bobOther.React(ctx, cid, old[3], "👍"))
			applied(t)(aliceC.React(ctx, cid, old[3], "👍"))
			applied(t)(aliceC.Edit(ctx, cid, old[5], "m6 edited again"))
			id, err := aliceC.SendReply(ctx, cid, old[0], "re m1")
			require.NoError(t, err)
			_, err = aliceC.WaitSent(ctx, id)
			require.NoError(t, err)
			texts := make([]string, tc.more)
			for i := range texts {
				texts[i] = fmt.Sprintf("more %d", i)
			}
			more := sendAll(t, ra, cid, texts...)
			applied(t)(aliceC.Edit(ctx, cid, more[0], "more 0 edited"))
			applied(t)(aliceC.Delete(ctx, cid, more[1]))
			applied(t)(bobOther.React(ctx, cid, more[2], "👀"))
			w.env.WaitCaughtUp(t, 60*time.Second)

			// Back.
			c2, err := client.New(cfg)
			require.NoError(t, err)
			r2 := start(t, c2, a)
			converge(t, w, bob, r2, nil)
			a.mu.Lock()
			tooLongs := len(a.tooLongs)
			var stale []client.Hole
			if tooLongs > 0 {
				stale = a.tooLongs[0].Stale[cid]
			}
			a.mu.Unlock()
			if tc.tooLong {
				require.Equal(t, 1, tooLongs)
				require.Equal(t, []client.Hole{{From: 1, To: old[5]}}, stale, "the messages the device had")
				var updated []int64
				for {
					res, err := c2.Backfill(ctx, cid)
					require.NoError(t, err)
					for _, u := range res.Updates {
						updated = append(updated, u.Seq)
					}
					if len(res.Remaining) == 0 {
						break
					}
				}
				require.Equal(t, []int64{old[0], old[1], old[2], old[3], old[5]}, updated,
					"Backfill hands over the changes the jump skipped, of the changed messages only")
			} else {
				require.Zero(t, tooLongs)
				backfillAll(t, c2, a, cid)
			}
			require.Empty(t, c2.Holes())

			// A change after the return comes live.
			applied(t)(aliceC.Edit(ctx, cid, old[0], "m1 edited live"))
			converge(t, w, bob, r2, nil)
			requireUpdatesAscending(t, a)
			require.Equal(t, serverView(t, c2, cid), viewOf(t, a, cid))
			require.NoError(t, r2.stop())
			require.NoError(t, ra.stop())
		})
	}
}

// TestChangeRetried: a change whose answer was lost (the gateway applied
// it) is retried with the same change_id until an answer comes, and
// applies once: an edit made meanwhile is not undone by the retry. The
// same through 503s with Retry-After. A reply queued by a client that
// stops before sending it goes out after the restart, still a reply.
func TestChangeRetried(t *testing.T) {
	noClientGoroutines(t)
	w := changesWorld(t, nil)
	ctx := context.Background()
	const alice = 1
	direct := w.direct(t, alice)
	rd := start(t, direct, newApp())
	cid, err := direct.CreateConversation(ctx, "retries")
	require.NoError(t, err)
	seqs := sendAll(t, rd, cid, "first", "second")

	p := newFaultProxy(t, w.url, 5)
	c, err := client.New(w.config(t, p.url, alice, newApp()))
	require.NoError(t, err)
	version := func(seq int64) (v int64, changes int) {
		err := w.env.ConvPool(cid).QueryRow(ctx, `SELECT m.version, (SELECT count(*) FROM changes WHERE conversation_id = $1 AND seq = $2)
			FROM messages m WHERE m.conversation_id = $1 AND m.seq = $2`, cid, seq).Scan(&v, &changes)
		require.NoError(t, err)
		return v, changes
	}

	// The answers are lost: the edit applies, the client does not know.
	p.set(faults{DropRespP: 1})
	type result struct {
		res client.ChangeResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := c.Edit(ctx, cid, seqs[0], "first, edited")
		done <- result{res, err}
	}()
	waitFor(t, 30*time.Second, "the edit applied", func() bool { v, _ := version(seqs[0]); return v == 2 })
	// Another edit meanwhile; a retry with a new change_id would undo it.
	applied(t)(direct.Edit(ctx, cid, seqs[0], "first, edited again"))
	time.Sleep(200 * time.Millisecond) // more lost answers
	p.set(faults{})
	r := <-done
	m := applied(t)(r.res, r.err)
	require.Equal(t, "first, edited again", m.Text(), "the retry answers the message as it is")
	require.EqualValues(t, 3, m.Version)
	v, n := version(seqs[0])
	require.EqualValues(t, 3, v)
	require.Equal(t, 2, n, "one change per change_id")
	var id string
	require.NoError(t, w.env.ConvPool(cid).QueryRow(ctx, `SELECT change_id::text FROM changes WHERE conversation_id = $1 AND seq = $2 AND version = 2`,
		cid, seqs[0]).Scan(&id))
	require.Equal(t, r.res.Change.ChangeID, id, "the retries carried the first attempt's change_id")

	// Overload: 503/429 with Retry-After, then the path heals.
	p.set(faults{StatusP: 1, RetryAfter: 1})
	go func() {
		res, err := c.React(ctx, cid, seqs[1], "👍")
		done <- result{res, err}
	}()
	time.Sleep(1500 * time.Millisecond)
	p.set(faults{})
	r = <-done
	m = applied(t)(r.res, r.err)
	require.Equal(t, []client.Reaction{{Emoji: "👍", Count: 1, Me: true}}, m.Reactions)
	_, n = version(seqs[1])
	require.Equal(t, 1, n)

	// A context that ends stops the retries.
	p.set(faults{DropReqP: 1})
	sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = c.Unreact(sctx, cid, seqs[1])
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	p.set(faults{})

	// A reply survives a restart in the outbox.
	store := client.NewMemoryStore()
	cfg := w.config(t, w.url, alice, newApp())
	cfg.Store = store
	off, err := client.New(cfg)
	require.NoError(t, err)
	id, err = off.SendReply(ctx, cid, seqs[0], "a reply")
	require.NoError(t, err)
	require.Equal(t, seqs[0], off.Outbox()[0].ReplyTo)
	back, err := client.New(cfg)
	require.NoError(t, err)
	rb := start(t, back, newApp())
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	res, err := back.WaitSent(wctx, id)
	require.NoError(t, err)
	require.NoError(t, res.Err)
	require.Equal(t, seqs[0], res.Message.ReplyTo)
	msgs, _, err := direct.History(ctx, cid, 0, 10)
	require.NoError(t, err)
	require.Equal(t, seqs[0], msgs[len(msgs)-1].ReplyTo)
	require.NoError(t, rb.stop())
	require.NoError(t, rd.stop())
}
