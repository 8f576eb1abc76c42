package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// The gateway side of read fan-out (docs/large-conversations.md). The
// tests set the columns the projector sets (read_fanout, last_seq,
// change_count, changed_ord) on small conversations and send the L/M/S
// tokens it sends, with projection.Encoder, so that each case is exact
// (the projector's own rules are projector's tests, and the sides run
// together in client's end-to-end tests).

// setReadFanout puts conversation cid in read mode (or back), as a channel
// so that the projector keeps it there whatever its member count.
func setReadFanout(t testing.TB, tg *tgw, cid int64, on bool) {
	t.Helper()
	_, err := tg.env.ConvPool(cid).Exec(context.Background(), `UPDATE conversations SET read_fanout = $2, channel = $2 WHERE id = $1`, cid, on)
	require.NoError(t, err)
	tg.env.Poked()
}

// setChanged marks message (cid, seq) changed at ord and the
// conversation's change count at least ord.
func setChanged(t testing.TB, tg *tgw, cid, seq, ord int64) {
	t.Helper()
	ctx := context.Background()
	_, err := tg.env.ConvPool(cid).Exec(ctx, `UPDATE messages SET changed_ord = $3 WHERE conversation_id = $1 AND seq = $2`, cid, seq, ord)
	require.NoError(t, err)
	_, err = tg.env.ConvPool(cid).Exec(ctx, `UPDATE conversations SET change_count = greatest(change_count, $2) WHERE id = $1`, cid, ord)
	require.NoError(t, err)
	tg.env.Poked()
}

// notifyLarge sends what enc holds on the gateway's channel.
func notifyLarge(t testing.TB, tg *tgw, fill func(e *projection.Encoder)) {
	t.Helper()
	var enc projection.Encoder
	fill(&enc)
	for _, pl := range enc.Payloads() {
		_, err := tg.env.Pool.Exec(context.Background(), `SELECT pg_notify($1, $2)`, tg.g.cfg.Channel, pl)
		require.NoError(t, err)
	}
}

// lastSeq reads conversations.last_seq and change_count.
func lastSeq(t testing.TB, tg *tgw, cid int64) (seq, changes int64) {
	t.Helper()
	require.NoError(t, tg.env.ConvPool(cid).QueryRow(context.Background(),
		`SELECT last_seq, change_count FROM conversations WHERE id = $1`, cid).Scan(&seq, &changes))
	return seq, changes
}

func historyOf(t testing.TB, u *user, cid int64, query string) (protocol.History, resp) {
	t.Helper()
	r := u.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/messages?%s", cid, query), nil)
	var h protocol.History
	if r.status == http.StatusOK {
		r.decode(t, &h)
	}
	return h, r
}

func seqsOf(ms []protocol.Message) []int64 {
	out := []int64{}
	for _, m := range ms {
		out = append(out, m.Seq)
	}
	return out
}

// History reads forward (?after) and by change (?changed_after), with the
// member spans' visibility, has_more and changed_ord; the three cursors
// exclude each other.
func TestHistoryAfterAndChangedAfter(t *testing.T) {
	tg := newGateway(t, nil)
	a, c := tg.user(t, 1), tg.user(t, 3)
	cid := a.create(t, "big", 2)
	var sent []protocol.Message
	for i := range 5 {
		sent = append(sent, a.send(t, cid, fmt.Sprint("m", i)))
	}
	setChanged(t, tg, cid, sent[2].Seq, 1)
	setChanged(t, tg, cid, sent[0].Seq, 2)

	h, r := historyOf(t, a, cid, fmt.Sprintf("after=%d&limit=2", sent[1].Seq))
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, []int64{sent[2].Seq, sent[3].Seq}, seqsOf(h.Messages))
	require.True(t, h.HasMore)
	require.EqualValues(t, 1, h.Messages[0].ChangedOrd)
	require.Zero(t, h.Messages[1].ChangedOrd)
	require.NotContains(t, string(r.body), `"changed_ord":0`)
	h, _ = historyOf(t, a, cid, fmt.Sprintf("after=%d", sent[3].Seq))
	require.Equal(t, []int64{sent[4].Seq}, seqsOf(h.Messages))
	require.False(t, h.HasMore)
	h, r = historyOf(t, a, cid, fmt.Sprintf("after=%d", sent[4].Seq))
	require.Equal(t, []int64{}, seqsOf(h.Messages))
	require.Contains(t, string(r.body), `"messages":[]`)

	h, _ = historyOf(t, a, cid, "changed_after=0")
	require.Equal(t, []int64{sent[2].Seq, sent[0].Seq}, seqsOf(h.Messages))
	require.Equal(t, []int64{1, 2}, []int64{h.Messages[0].ChangedOrd, h.Messages[1].ChangedOrd})
	h, _ = historyOf(t, a, cid, "changed_after=0&limit=1")
	require.Equal(t, []int64{sent[2].Seq}, seqsOf(h.Messages))
	require.True(t, h.HasMore)
	h, _ = historyOf(t, a, cid, "changed_after=1")
	require.Equal(t, []int64{sent[0].Seq}, seqsOf(h.Messages))
	require.False(t, h.HasMore)

	// A member added later sees from its join on, in both orders.
	require.Equal(t, http.StatusAccepted, a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", cid), map[string]any{"user_id": 3}).status)
	late := a.send(t, cid, "after the join")
	setChanged(t, tg, cid, late.Seq, 3)
	h, _ = historyOf(t, c, cid, "after=0")
	require.Equal(t, []int64{late.Seq - 1, late.Seq}, seqsOf(h.Messages)) // its member.added, then the text
	h, _ = historyOf(t, c, cid, "changed_after=0")
	require.Equal(t, []int64{late.Seq}, seqsOf(h.Messages))

	for _, q := range []string{"after=1&before=3", "after=1&changed_after=0", "before=2&changed_after=0",
		"after=-1", "changed_after=-1", "changed_after=x", "after=", "after=1&after=2", "before=0"} {
		_, r := historyOf(t, a, cid, q)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", q, r)
		var e protocol.ErrorBody
		r.decode(t, &e)
		require.Equal(t, protocol.CodeBadRequest, e.Error.Code, q)
	}
	// Outsiders: 403 as for before.
	_, r = historyOf(t, tg.user(t, 9), cid, "after=0")
	require.Equal(t, http.StatusForbidden, r.status, "%s", r)
}

// POST .../members takes user_ids (one member.added each, 202 once all
// are appended and the last is visible); bad bodies are 400s. POST
// /v1/conversations takes channel.
func TestBulkAddMembers(t *testing.T) {
	tg := newGateway(t, nil)
	a := tg.user(t, 1)
	cid := a.create(t, "bulk")
	path := fmt.Sprintf("/v1/conversations/%d/members", cid)
	ids := []int64{}
	for i := int64(100); i < 150; i++ {
		ids = append(ids, i)
	}
	r := a.do(t, "POST", path, map[string]any{"user_ids": ids})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	var n int
	require.NoError(t, tg.env.ConvPool(cid).QueryRow(context.Background(),
		`SELECT count(*) FROM member_spans WHERE conversation_id = $1 AND left_seq IS NULL AND user_id >= 100`, cid).Scan(&n))
	require.Equal(t, len(ids), n, "the last one visible means all are (one partition, in order)")
	var ml protocol.MemberList
	a.do(t, "GET", path+"?limit=1000", nil).decode(t, &ml)
	require.Len(t, ml.Members, len(ids)+1)

	many := make([]int64, MaxBulkMembers+1)
	for i := range many {
		many[i] = int64(i + 1)
	}
	for name, body := range map[string]any{
		"both":      map[string]any{"user_id": 5, "user_ids": []int64{6}},
		"neither":   map[string]any{},
		"empty":     map[string]any{"user_ids": []int64{}},
		"repeated":  map[string]any{"user_ids": []int64{6, 7, 6}},
		"zero":      map[string]any{"user_ids": []int64{6, 0}},
		"negative":  map[string]any{"user_ids": []int64{-6}},
		"too many":  map[string]any{"user_ids": many},
		"null list": `{"user_ids": null}`,
		"strings":   `{"user_ids": ["6"]}`,
	} {
		r := a.do(t, "POST", path, body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", name, r)
		var e protocol.ErrorBody
		r.decode(t, &e)
		require.Equal(t, protocol.CodeBadRequest, e.Error.Code, name)
	}
	// An outsider's bulk add is refused as a single one is.
	r = tg.user(t, 999).do(t, "POST", path, map[string]any{"user_ids": []int64{5}})
	require.Equal(t, http.StatusForbidden, r.status, "%s", r)

	r = a.do(t, "POST", "/v1/conversations", map[string]any{"title": "news", "members": []int64{2}, "channel": true})
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	r = a.do(t, "POST", "/v1/conversations", map[string]any{"channel": "yes"})
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r)
}

// The large list rides on sync answers and too-long answers, and the ETag
// covers it: a third part only for users who have one, a 304 while it
// does not change, a 200 when it does.
func TestSyncLargeListAndETag(t *testing.T) {
	tg := newGateway(t, nil)
	a, b := tg.user(t, 1), tg.user(t, 2)
	big := a.create(t, "big", 2)
	a.create(t, "small", 2)
	a.send(t, big, "hello")
	setReadFanout(t, tg, big, true)
	require.Equal(t, http.StatusAccepted, b.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/2", big), nil).status)
	seq, _ := lastSeq(t, tg, big)

	s := a.sync(t, "")
	require.Equal(t, []protocol.LargeConv{{ConversationID: big, LastSeq: seq}}, s.Large)
	r := a.do(t, "GET", fmt.Sprintf("/v1/sync?after=%d", s.Head), nil)
	tag := r.header.Get("ETag")
	require.Regexp(t, `^"\d+\.\d+\.[0-9a-z]+"$`, tag)
	require.Contains(t, string(r.body), `"large":[{"conversation_id":`)
	r = a.do(t, "GET", fmt.Sprintf("/v1/sync?after=%d", s.Head), nil, "If-None-Match", tag)
	require.Equal(t, http.StatusNotModified, r.status)

	// The conversation moves (no inbox entry for a: read mode): same head,
	// new tag, a 200 with the new list.
	setChanged(t, tg, big, seq, 1)
	r = a.do(t, "GET", fmt.Sprintf("/v1/sync?after=%d", s.Head), nil, "If-None-Match", tag)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.NotEqual(t, tag, r.header.Get("ETag"))
	var s2 protocol.SyncAnswer
	r.decode(t, &s2)
	require.Equal(t, s.Head, s2.Head)
	require.Equal(t, []protocol.LargeConv{{ConversationID: big, LastSeq: seq, ChangeCount: 1}}, s2.Large)

	// b left it: no list, the two-part tag, and the 304 without a query.
	sb := b.sync(t, "")
	require.Empty(t, sb.Large)
	r = b.do(t, "GET", fmt.Sprintf("/v1/sync?after=%d", sb.Head), nil)
	require.NotContains(t, string(r.body), `"large"`)
	btag := r.header.Get("ETag")
	require.Equal(t, fmt.Sprintf(`"%d.%d"`, sb.Epoch, sb.Head), btag)
	hits := counterValue(tg.g.metrics.headHit)
	r = b.do(t, "GET", fmt.Sprintf("/v1/sync?after=%d", sb.Head), nil, "If-None-Match", btag)
	require.Equal(t, http.StatusNotModified, r.status)
	require.Equal(t, hits+1, counterValue(tg.g.metrics.headHit))

	// The too-long answer carries it too.
	tl := a.sync(t, fmt.Sprintf("after=1&epoch=%d", s.Epoch+7))
	require.True(t, tl.TooLong)
	require.Equal(t, s2.Large, tl.Large)
}

// A long-poll of a member at its head is woken by an L token of one of
// its read-mode conversations and answers with the new list; one whose
// If-None-Match names an older list answers at once.
func TestLongPollWokenByLargeToken(t *testing.T) {
	tg := newGateway(t, nil)
	a := tg.user(t, 1)
	big := a.create(t, "big", 2)
	setReadFanout(t, tg, big, true)
	s := a.sync(t, "")
	r := a.do(t, "GET", fmt.Sprintf("/v1/sync?after=%d", s.Head), nil)
	tag := r.header.Get("ETag")

	done := make(chan resp, 1)
	start := time.Now()
	go func() {
		r, err := a.doE("GET", fmt.Sprintf("/v1/sync?after=%d&wait=25", s.Head), nil, "If-None-Match", tag)
		if err != nil {
			r.status = -1
		}
		done <- r
	}()
	waitFor(t, 10*time.Second, "the long-poll held", func() bool { return tg.g.held.Load() == 1 })
	// A token of another conversation does not end it.
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Large(projection.Large{Conv: big + 1000, LastSeq: 5}) })
	select {
	case r := <-done:
		t.Fatalf("answered on another conversation's token: %s", r)
	case <-time.After(300 * time.Millisecond):
	}
	seq, _ := lastSeq(t, tg, big)
	_, err := tg.env.ConvPool(big).Exec(context.Background(), `UPDATE conversations SET last_seq = last_seq + 1 WHERE id = $1`, big)
	require.NoError(t, err)
	tg.env.Poked()
	notifyLarge(t, tg, func(e *projection.Encoder) { e.Large(projection.Large{Conv: big, LastSeq: seq + 1}) })
	r = <-done
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Less(t, time.Since(start), 20*time.Second)
	var got protocol.SyncAnswer
	r.decode(t, &got)
	require.Empty(t, got.Entries)
	require.Equal(t, []protocol.LargeConv{{ConversationID: big, LastSeq: seq + 1}}, got.Large)
	require.NotEqual(t, tag, r.header.Get("ETag"))

	// The old tag names an older list: no hold.
	t0 := time.Now()
	r = a.do(t, "GET", fmt.Sprintf("/v1/sync?after=%d&wait=25", s.Head), nil, "If-None-Match", tag)
	require.Equal(t, http.StatusOK, r.status)
	require.Less(t, time.Since(t0), 10*time.Second)
	require.True(t, strings.Contains(string(r.body), `"large"`))
}
