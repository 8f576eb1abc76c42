package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/testenv"
)

// End-to-end tests of read fan-out (docs/large-conversations.md): real
// PostgreSQL, Kafka (kfake), fanout, gateway and Go SDK clients around
// conversations that switch to read fan-out and back, and a channel.

// lgThreshold is the fanouts' --large-threshold in these tests.
const lgThreshold = 20

// callErr makes one request with token to the gateway and returns the
// status and the body; usable off the test's goroutine.
func (w *world) callErr(token, method, path string, in any) (int, []byte, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, w.url+path, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return res.StatusCode, out, err
}

// call makes one request of user to the gateway and returns the status
// and the body.
func (w *world) call(t testing.TB, user int64, method, path string, in any) (int, []byte) {
	t.Helper()
	st, out, err := w.callErr(w.token(t, user), method, path, in)
	require.NoError(t, err)
	return st, out
}

// trySend sends text with token (mentioning mentions) and returns the seq
// (0 when the gateway answered 202: appended, not yet projected); usable
// off the test's goroutine.
func (w *world) trySend(token string, cid int64, text string, mentions ...int64) (int64, error) {
	in := map[string]any{"msg_id": uuid.NewString(), "body": text}
	if len(mentions) > 0 {
		in["mentions"] = mentions
	}
	st, out, err := w.callErr(token, http.MethodPost, fmt.Sprintf("/v1/conversations/%d/messages", cid), in)
	switch {
	case err != nil:
		return 0, err
	case st == http.StatusAccepted:
		return 0, nil
	case st != http.StatusCreated:
		return 0, fmt.Errorf("send: status %d: %s", st, out)
	}
	var m client.Message
	if err := json.Unmarshal(out, &m); err != nil {
		return 0, fmt.Errorf("send: %w: %s", err, out)
	}
	return m.Seq, nil
}

// lgSend sends text as user (mentioning mentions) and returns the seq
// (0 when the gateway answered 202: appended, not yet projected).
func (w *world) lgSend(t testing.TB, user, cid int64, text string, mentions ...int64) int64 {
	t.Helper()
	seq, err := w.trySend(w.token(t, user), cid, text, mentions...)
	require.NoError(t, err, "send of user %d", user)
	return seq
}

// lgCreate creates a conversation of user with members (channel: a
// channel) and returns its id.
func (w *world) lgCreate(t testing.TB, user int64, title string, channel bool, members ...int64) int64 {
	t.Helper()
	st, out := w.call(t, user, http.MethodPost, "/v1/conversations",
		map[string]any{"title": title, "members": members, "channel": channel})
	require.Equal(t, http.StatusCreated, st, "%s", out)
	var c struct {
		ID int64 `json:"conversation_id"`
	}
	require.NoError(t, json.Unmarshal(out, &c), "%s", out)
	require.NotZero(t, c.ID, "%s", out)
	return c.ID
}

// addBulk adds ids to cid in one request (user_ids) with token; usable
// off the test's goroutine.
func (w *world) addBulk(token string, cid int64, ids []int64) error {
	st, out, err := w.callErr(token, http.MethodPost, fmt.Sprintf("/v1/conversations/%d/members", cid), map[string]any{"user_ids": ids})
	if err == nil && st != http.StatusAccepted {
		err = fmt.Errorf("bulk add: status %d: %s", st, out)
	}
	return err
}

// remove removes target from cid with token; usable off the test's
// goroutine.
func (w *world) remove(token string, cid, target int64) error {
	st, out, err := w.callErr(token, http.MethodDelete, fmt.Sprintf("/v1/conversations/%d/members/%d", cid, target), nil)
	if err == nil && st != http.StatusAccepted {
		err = fmt.Errorf("remove %d: status %d: %s", target, st, out)
	}
	return err
}

func (w *world) lgAddBulk(t testing.TB, user, cid int64, ids []int64) {
	t.Helper()
	require.NoError(t, w.addBulk(w.token(t, user), cid, ids))
}

func (w *world) lgRemove(t testing.TB, user, cid, target int64) {
	t.Helper()
	require.NoError(t, w.remove(w.token(t, user), cid, target))
}

// lgMode is conversation cid's read_fanout and its mode history
// (from_seq:read_fanout).
func (w *world) lgMode(t testing.TB, cid int64) (bool, []string) {
	t.Helper()
	ctx := context.Background()
	var rf bool
	require.NoError(t, w.env.ConvPool(cid).QueryRow(ctx, `SELECT read_fanout FROM conversations WHERE id = $1`, cid).Scan(&rf))
	rows, err := w.env.ConvPool(cid).Query(ctx, `SELECT from_seq, read_fanout FROM conversation_modes WHERE conversation_id = $1 ORDER BY from_seq`, cid)
	require.NoError(t, err)
	defer rows.Close()
	var hist []string
	for rows.Next() {
		var from int64
		var r bool
		require.NoError(t, rows.Scan(&from, &r))
		hist = append(hist, fmt.Sprintf("%d:%v", from, r))
	}
	require.NoError(t, rows.Err())
	return rf, hist
}

// lgDescribe is describe without the reactions' me: a messages frame
// serves every member of a read-mode conversation and carries no me (a
// documented limit, docs/large-conversations.md).
func lgDescribe(m client.Message) string {
	for i := range m.Reactions {
		m.Reactions[i].Me = false
	}
	m.Reactions = slices.Clone(m.Reactions)
	return describe(m)
}

// lgServerHistory is conversation cid as user sees it in GET …/messages.
func lgServerHistory(t testing.TB, c *client.Client, cid int64) []client.Message {
	t.Helper()
	var server []client.Message
	for before := int64(0); ; {
		msgs, more, err := c.History(context.Background(), cid, before, 200)
		require.NoError(t, err)
		server = append(slices.Clone(msgs), server...)
		if !more || len(msgs) == 0 {
			break
		}
		before = msgs[0].Seq
	}
	return server
}

// lgViewProblems compares what device d was handed of conversation cid
// with the history its user reads over HTTP: each message of the
// history delivered once (OnEntry or OnHistory), the OnEntry deliveries in
// seq order, no version handed twice or going back, and the last state of
// each message equal to the server's (for the current span; a closed
// span's may be older, never newer, equal when the versions are).
func lgViewProblems(t testing.TB, w *world, d *rcDevice, cid int64) []string {
	t.Helper()
	ctx := context.Background()
	var curFrom int64 = -1
	require.NoError(t, w.env.ConvPool(cid).QueryRow(ctx, `SELECT coalesce(max(joined_seq) FILTER (WHERE left_seq IS NULL), -1)
FROM member_spans WHERE conversation_id = $1 AND user_id = $2`, cid, d.user).Scan(&curFrom))
	current := func(seq int64) bool { return curFrom >= 0 && seq >= curFrom }

	view, bad := d.viewOf(cid, true)

	for _, sm := range lgServerHistory(t, d.c, cid) {
		dm, ok := view[sm.Seq]
		delete(view, sm.Seq)
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("#%d missing: server %s", sm.Seq, lgDescribe(sm)))
		case current(sm.Seq) && lgDescribe(dm) != lgDescribe(sm):
			bad = append(bad, fmt.Sprintf("#%d (current span) device %s, server %s", sm.Seq, lgDescribe(dm), lgDescribe(sm)))
		case current(sm.Seq):
		case dm.CurrentVersion() > sm.CurrentVersion():
			bad = append(bad, fmt.Sprintf("#%d (closed span) device v%d newer than the server's v%d", sm.Seq, dm.CurrentVersion(), sm.CurrentVersion()))
		case dm.CurrentVersion() == sm.CurrentVersion() && lgDescribe(dm) != lgDescribe(sm):
			bad = append(bad, fmt.Sprintf("#%d (closed span) device %s, server %s", sm.Seq, lgDescribe(dm), lgDescribe(sm)))
		}
	}
	for _, s := range slices.Sorted(maps.Keys(view)) {
		bad = append(bad, fmt.Sprintf("#%d not in the user's history: device %s", s, lgDescribe(view[s])))
	}
	return bad
}

// lgConverge waits until every device's view of every conversation of
// cids equals the server's, then fails the test with the differences of
// those that do not.
func lgConverge(t testing.TB, w *world, devs []*rcDevice, cids ...int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, d := range devs {
		for _, cid := range cids {
			for {
				bad := lgViewProblems(t, w, d, cid)
				if len(bad) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("%s, conversation %d: %d messages differ from the server's view:\n  %s",
						d.name, cid, len(bad), strings.Join(bad, "\n  "))
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
}

// lgRequireCounts checks each device user's record of cid (GET
// /v1/conversations): its unread count is the text messages by others,
// not deleted, after its read seq, of the history it reads.
func lgRequireCounts(t testing.TB, devs []*rcDevice, cid int64) {
	t.Helper()
	for _, d := range devs {
		recs, err := d.c.Conversations(context.Background())
		require.NoError(t, err, d.name)
		var rec *client.Record
		for i := range recs {
			if recs[i].ConversationID == cid {
				rec = &recs[i]
			}
		}
		require.NotNil(t, rec, "%s has no record of %d", d.name, cid)
		if rec.Removed {
			require.Zero(t, rec.UnreadCount, d.name)
			continue
		}
		var want int64
		for _, m := range lgServerHistory(t, d.c, cid) {
			if m.Seq > rec.ReadSeq && m.Kind == "text" && m.SenderID != d.user && !m.Deleted {
				want++
			}
		}
		require.Equal(t, want, rec.UnreadCount, "%s: unread count of %d (read seq %d, last seq %d)", d.name, cid, rec.ReadSeq, rec.LastSeq)
		require.LessOrEqual(t, rec.MentionCount, rec.UnreadCount, d.name)
	}
}

// lgVerify runs projector.Verify (I*, M*, C*, L1–L4).
func lgVerify(t testing.TB, w *world) {
	t.Helper()
	w.env.Verify(t)
}

func lgDevice(t *testing.T, w *world, dir string, user int64, tr client.Transport, tag string) *rcDevice {
	d := &rcDevice{name: fmt.Sprintf("user %d (%s, %s)", user, tr, tag), user: user, tr: tr,
		path: filepath.Join(dir, fmt.Sprintf("u%d", user), "state.json"), app: newApp()}
	d.up(t, w)
	return d
}

// TestLargeConversationEndToEnd: a conversation grows past the threshold
// by a bulk add, lives in read mode (sends, mentions, edits, reactions, a
// delete, reads that arm), shrinks to half of it by removals and lives in
// write mode again; a channel lives in read mode from its first seq.
// Clients on the WebSocket and on long-polling, one offline through the
// switches and started again on its saved store, and one removed on the
// way, each end with every message they can see exactly once, in seq
// order, in the server's state, with sane unread counts; Verify is OK.
func TestLargeConversationEndToEnd(t *testing.T) {
	noClientGoroutines(t)
	t0 := time.Now()
	env := testenv.New(t, testenv.Options{LargeThreshold: lgThreshold})
	env.StartFanout(t)
	w := serveWorld(t, env, nil, nil)
	ctx := context.Background()
	dir := t.TempDir()
	actor := func(u int64) *client.Client { return w.direct(t, u) }

	cid := w.lgCreate(t, 1, "grows", false, 2, 3, 4, 5)
	u1 := lgDevice(t, w, dir, 1, client.TransportWebSocket, "owner")
	u2 := lgDevice(t, w, dir, 2, client.TransportAuto, "reads")
	u3 := lgDevice(t, w, dir, 3, client.TransportPolling, "long-poll")
	u4 := lgDevice(t, w, dir, 4, client.TransportWebSocket, "offline for a while")
	u5 := lgDevice(t, w, dir, 5, client.TransportWebSocket, "removed")
	devs := []*rcDevice{u1, u2, u3, u4, u5}

	// Write mode.
	var seqs []int64
	for i := 0; i < 8; i++ {
		seqs = append(seqs, w.lgSend(t, int64(1+i%5), cid, fmt.Sprintf("write %d", i)))
	}
	_, err := actor(1).Edit(ctx, cid, seqs[0], "write 0, edited")
	require.NoError(t, err)
	_, err = actor(2).React(ctx, cid, seqs[0], "👍")
	require.NoError(t, err)
	lgConverge(t, w, devs, cid)
	u4.down(t)
	t.Logf("%v write mode done", time.Since(t0))

	// Up: 20 more members in one request (25 > 20).
	var bulk []int64
	for u := int64(100); u < 119; u++ {
		bulk = append(bulk, u)
	}
	bulk = append(bulk, 150)
	w.lgAddBulk(t, 1, cid, bulk)
	waitFor(t, 30*time.Second, "the switch up", func() bool { rf, _ := w.lgMode(t, cid); return rf })
	u150 := lgDevice(t, w, dir, 150, client.TransportWebSocket, "joined in bulk")
	devs = append(devs, u150)

	// Read mode: traffic from old and new members, a mention, changes of
	// messages of both modes, reads that arm.
	for i := 0; i < 12; i++ {
		from := []int64{1, 2, 3, 5, 100, 150}[i%6]
		var mentions []int64
		if i == 4 {
			mentions = []int64{3, 4}
		}
		seqs = append(seqs, w.lgSend(t, from, cid, fmt.Sprintf("read %d", i), mentions...))
	}
	require.NoError(t, actor(2).MarkRead(ctx, cid, seqs[len(seqs)-1]))
	require.NoError(t, actor(150).MarkRead(ctx, cid, seqs[len(seqs)-1]))
	seqs = append(seqs, w.lgSend(t, 3, cid, "after the reads"))
	_, err = actor(2).Edit(ctx, cid, seqs[1], "write 1, edited in read mode")
	require.NoError(t, err)
	_, err = actor(1).React(ctx, cid, seqs[8], "🎉")
	require.NoError(t, err)
	_, err = actor(150).React(ctx, cid, seqs[8], "👀")
	require.NoError(t, err)
	_, err = actor(5).Edit(ctx, cid, seqs[11], "read 3, edited")
	require.NoError(t, err)
	_, err = actor(1).Delete(ctx, cid, seqs[12])
	require.NoError(t, err)
	t.Logf("%v read mode sent", time.Since(t0))
	online := []*rcDevice{u1, u2, u3, u5, u150}
	lgConverge(t, w, online, cid)
	lgRequireCounts(t, online, cid)
	t.Logf("%v read mode converged", time.Since(t0))

	// Down: removals to 10 members (half the threshold), u5 among them,
	// sends in between.
	for i, u := range append([]int64{5}, bulk[:14]...) {
		w.lgRemove(t, 1, cid, u)
		if i%5 == 0 {
			w.lgSend(t, 2, cid, fmt.Sprintf("while shrinking %d", i))
		}
	}
	waitFor(t, 30*time.Second, "the switch down", func() bool { rf, _ := w.lgMode(t, cid); return !rf })
	for i := 0; i < 6; i++ {
		seqs = append(seqs, w.lgSend(t, []int64{1, 3, 150}[i%3], cid, fmt.Sprintf("write again %d", i)))
	}
	_, err = actor(3).Edit(ctx, cid, seqs[10], "read 2, edited in write mode")
	require.NoError(t, err)
	_, err = actor(150).React(ctx, cid, seqs[8], "🔥")
	require.NoError(t, err)

	t.Logf("%v down", time.Since(t0))
	// A channel, read mode from its first seq.
	ch := w.lgCreate(t, 1, "news", true, 2, 3)
	for i := 0; i < 6; i++ {
		w.lgSend(t, 1, ch, fmt.Sprintf("news %d", i))
	}
	cs := w.lgSend(t, 2, ch, "a reader speaks")
	_, err = actor(1).React(ctx, ch, cs, "👍")
	require.NoError(t, err)

	// The offline device comes back on its saved store.
	u4.up(t, w)
	t.Logf("%v channel", time.Since(t0))
	lgConverge(t, w, devs, cid)
	lgConverge(t, w, []*rcDevice{u1, u2, u3}, ch)
	rf, hist := w.lgMode(t, cid)
	require.False(t, rf)
	require.Len(t, hist, 3, "created in write mode, up, down: %v", hist)
	rf, hist = w.lgMode(t, ch)
	require.True(t, rf)
	require.Len(t, hist, 1, "a channel never switches: %v", hist)
	lgRequireCounts(t, devs, cid)
	lgRequireCounts(t, []*rcDevice{u1, u2, u3}, ch)
	t.Logf("%v converged", time.Since(t0))
	lgVerify(t, w)
}

// lgMembers is conversation cid's current member count.
func (w *world) lgMembers(t testing.TB, cid int64) int {
	t.Helper()
	var n int
	require.NoError(t, w.env.ConvPool(cid).QueryRow(context.Background(),
		`SELECT count(*) FROM member_spans WHERE conversation_id = $1 AND left_seq IS NULL`, cid).Scan(&n))
	return n
}

// TestLargeSwitchesUnderFanoutKills: the switch survives crashes. A
// conversation crosses the threshold up (a bulk add) and down (removals)
// under a send load, with the fanout (an `inboxd fanout` process) killed
// with SIGKILL during each switch and another started. At the end Verify is
// OK (L1–L4 included), the mode history is write, read, write, and every
// member's device (WebSocket, long-polling, one offline through both
// switches, one removed on the way down) has every message it can see
// exactly once, in seq order, in the server's state.
func TestLargeSwitchesUnderFanoutKills(t *testing.T) {
	if testing.Short() {
		t.Skip("kills fanout processes")
	}
	noClientGoroutines(t)
	t0 := time.Now()
	env := testenv.New(t, testenv.Options{})
	f := newFanoutProcs(t, env, "fanout-large", "INBOXD_MAX_POLL_RECORDS=4", fmt.Sprintf("INBOXD_LARGE_THRESHOLD=%d", lgThreshold))
	f.start()
	// A short ack wait: requests made while no fanout runs answer 202 soon.
	w := serveWorld(t, env, func(c *gateway.Config) { c.AckWait = 2 * time.Second }, nil)
	ctx := context.Background()
	dir := t.TempDir()

	cid := w.lgCreate(t, 1, "crosses", false, 2, 3, 4, 5, 6)
	u1 := lgDevice(t, w, dir, 1, client.TransportWebSocket, "owner")
	u2 := lgDevice(t, w, dir, 2, client.TransportAuto, "auto")
	u3 := lgDevice(t, w, dir, 3, client.TransportPolling, "long-poll")
	u4 := lgDevice(t, w, dir, 4, client.TransportWebSocket, "offline through both switches")
	w.lgSend(t, 1, cid, "hello")
	lgConverge(t, w, []*rcDevice{u4}, cid)
	u4.down(t)

	// The load: users 1-3 send all along (202s while no fanout runs).
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan int, 3)
	for _, u := range []int64{1, 2, 3} {
		tok := w.token(t, u)
		go func() {
			n := 0
			defer func() { loadDone <- n }()
			for loadCtx.Err() == nil {
				if _, err := w.trySend(tok, cid, fmt.Sprintf("load %d from %d", n, u)); err != nil {
					t.Errorf("load of user %d: %v", u, err)
					return
				}
				n++
				sleepFor(loadCtx, 5*time.Millisecond)
			}
		}()
	}
	stopped := false
	stopLoadWait := func() int {
		if stopped {
			return 0
		}
		stopped = true
		stopLoad()
		n := 0
		for range 3 {
			n += <-loadDone
		}
		return n
	}
	t.Cleanup(func() { stopLoadWait() })
	waitFor(t, 30*time.Second, "some load", func() bool {
		var l int64
		_ = env.ConvPool(cid).QueryRow(ctx, `SELECT last_seq FROM conversations WHERE id = $1`, cid).Scan(&l)
		return l > 20
	})

	// Up: 17 members in one request (6 + 17 = 23 > 20), appended while
	// no fanout runs; the next fanout (4 records a batch) is killed as
	// soon as the first join is visible, and again around the threshold.
	var bulk []int64
	for u := int64(100); u < 115; u++ {
		bulk = append(bulk, u)
	}
	bulk = append(bulk, 200, 201)
	tok1 := w.token(t, 1)
	var kills []string
	f.kill()
	require.NoError(t, w.addBulk(tok1, cid, bulk)) // 202 after the ack wait
	killAround := func(what string, cond func(n int) bool) {
		f.start()
		waitFor(t, 60*time.Second, what, func() bool { return cond(w.lgMembers(t, cid)) })
		f.kill()
		rf, _ := w.lgMode(t, cid)
		kills = append(kills, fmt.Sprintf("%s: killed at %d members, read mode %v", what, w.lgMembers(t, cid), rf))
	}
	killAround("the first join", func(n int) bool { return n > 6 })
	killAround("the threshold", func(n int) bool { return n >= lgThreshold })
	f.start()
	waitFor(t, 60*time.Second, "the switch up", func() bool { rf, _ := w.lgMode(t, cid); return rf })
	waitFor(t, 60*time.Second, "every join", func() bool { return w.lgMembers(t, cid) == 6+len(bulk) })
	u200 := lgDevice(t, w, dir, 200, client.TransportWebSocket, "removed on the way down")
	u201 := lgDevice(t, w, dir, 201, client.TransportPolling, "joined in bulk")
	t.Logf("%v up", time.Since(t0))

	// Read mode under the load: changes, a mention, reads that arm.
	s := w.lgSend(t, 201, cid, "a new member speaks", 4)
	require.NotZero(t, s)
	_, err := w.direct(t, 201).Edit(ctx, cid, s, "a new member speaks, edited")
	require.NoError(t, err)
	_, err = w.direct(t, 2).React(ctx, cid, s, "🎉")
	require.NoError(t, err)
	_, err = w.direct(t, 200).React(ctx, cid, s, "👀")
	require.NoError(t, err)
	require.NoError(t, w.direct(t, 2).MarkRead(ctx, cid, s))
	waitFor(t, 30*time.Second, "load in read mode", func() bool {
		var n int
		_ = env.ConvPool(cid).QueryRow(ctx, `SELECT count(*) FROM messages WHERE conversation_id = $1 AND kind = 'text'
AND seq >= (SELECT max(from_seq) FROM conversation_modes WHERE conversation_id = $1)`, cid).Scan(&n)
		return n >= 40
	})

	// Down: 13 removals (u200 among them) to 10 members, appended while
	// no fanout runs; the next fanout is killed as soon as the first is
	// visible, and again around half the threshold.
	f.kill()
	removals := append([]int64{200}, bulk[:12]...)
	errs := make(chan error, len(removals))
	for _, u := range removals {
		go func() { errs <- w.remove(tok1, cid, u) }()
	}
	for range removals {
		require.NoError(t, <-errs) // 202s after the ack wait
	}
	killAround("the first removal", func(n int) bool { return n < 23 })
	killAround("half the threshold", func(n int) bool { return n <= lgThreshold/2+2 })
	f.start()
	waitFor(t, 60*time.Second, "the switch down", func() bool { rf, _ := w.lgMode(t, cid); return !rf })
	t.Logf("%v down; kills: %s", time.Since(t0), strings.Join(kills, "; "))
	waitFor(t, 30*time.Second, "load after the switch down", func() bool {
		var n int
		_ = env.ConvPool(cid).QueryRow(ctx, `SELECT count(*) FROM messages WHERE conversation_id = $1 AND kind = 'text'
AND seq > (SELECT max(from_seq) FROM conversation_modes WHERE conversation_id = $1)`, cid).Scan(&n)
		return n >= 30
	})
	_, err = w.direct(t, 2).React(ctx, cid, s, "🔥")
	require.NoError(t, err)
	sent := stopLoadWait()
	env.WaitCaughtUp(t, time.Minute)

	u4.up(t, w)
	devs := []*rcDevice{u1, u2, u3, u4, u200, u201}
	lgConverge(t, w, devs, cid)
	rf, hist := w.lgMode(t, cid)
	require.False(t, rf)
	require.Len(t, hist, 3, "write, read, write: %v", hist)
	lgRequireCounts(t, devs, cid)
	lgVerify(t, w)
	var texts int
	require.NoError(t, env.ConvPool(cid).QueryRow(ctx, `SELECT count(*) FROM messages WHERE conversation_id = $1 AND kind = 'text' AND body LIKE 'load %'`, cid).Scan(&texts))
	require.Equal(t, sent, texts, "each load send projected once")
	t.Logf("%v done: %d load sends, modes %v", time.Since(t0), sent, hist)
}
