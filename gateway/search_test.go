package gateway

import (
	"context"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/migrations"
	"github.com/inboxd/inboxd/protocol"
)

// search is one GET /v1/search of u that must answer 200.
func (u *user) search(t testing.TB, query string) protocol.SearchResults {
	t.Helper()
	r := u.do(t, "GET", "/v1/search?"+query, nil)
	require.Equal(t, http.StatusOK, r.status, "%s: %s", query, r)
	var res protocol.SearchResults
	r.decode(t, &res)
	return res
}

func foundSeqs(res protocol.SearchResults) []int64 {
	out := []int64{}
	for _, r := range res.Results {
		out = append(out, r.Message.Seq)
	}
	return out
}

// TestSearchFilters: each filter of docs/protocol.md narrows the words'
// matches as it says; deleted and system messages are never found; a
// read-mode conversation is searched like any; snippets are the body's
// text in segments, not markup.
func TestSearchFilters(t *testing.T) {
	tg := attachGateway(t, func(t *testing.T, base string) attachments.Store {
		st, err := attachments.NewLocal(t.TempDir(), base, []byte("local-store-secret-0123456789"))
		require.NoError(t, err)
		return st
	}, nil)
	a, b, c := tg.user(t, 1), tg.user(t, 2), tg.user(t, 3)
	cid := a.create(t, "alpha", 2, 3) // seq 1: its creation, a system message naming "alpha"
	m1 := a.send(t, cid, "alpha <b>plain</b> & co")
	up := b.upload(t, cid, "a.txt", "text/plain", []byte("hello"))
	r := b.sendFiles(t, cid, "alpha with a file", up.ID)
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	m2 := decodeMsg(t, r)
	r = b.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid), map[string]any{"msg_id": uuid.NewString(), "body": "alpha for you", "mentions": []int64{1}})
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	m3 := decodeMsg(t, r)
	r = c.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid), map[string]any{"msg_id": uuid.NewString(), "body": "alpha for all", "mention_all": true})
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	m4 := decodeMsg(t, r)
	m5 := c.send(t, cid, "alpha soon gone")
	c.change(t, "DELETE", msgPath(cid, m5.Seq), map[string]any{"change_id": uuid.NewString()}, http.StatusOK)

	q := func(extra string) string { return "q=alpha&prefix=false&" + extra }
	all := a.search(t, q(""))
	require.Equal(t, []int64{m4.Seq, m3.Seq, m2.Seq, m1.Seq}, foundSeqs(all), "newest first; no system or deleted message")
	require.EqualValues(t, 4, *all.EstimatedTotal)
	require.Equal(t, []int64{m2.Seq}, foundSeqs(a.search(t, q("has_attachment=true"))))
	require.Equal(t, []int64{m4.Seq, m3.Seq, m1.Seq}, foundSeqs(a.search(t, q("has_attachment=false"))))
	require.Equal(t, []int64{m4.Seq, m3.Seq}, foundSeqs(a.search(t, q("mentions_me=true"))))
	require.Equal(t, []int64{m4.Seq}, foundSeqs(b.search(t, q("mentions_me=true"))), "b is mentioned by @all only")
	require.Equal(t, []int64{m3.Seq, m2.Seq}, foundSeqs(a.search(t, q("sender_id=2"))))
	require.Equal(t, []int64{m4.Seq, m3.Seq}, foundSeqs(a.search(t, q(fmt.Sprintf("conversation_id=%d&after_seq=%d", cid, m2.Seq)))))
	require.Equal(t, []int64{m2.Seq, m1.Seq}, foundSeqs(a.search(t, q(fmt.Sprintf("conversation_id=%d&before_seq=%d", cid, m3.Seq)))))
	after := strings.ToLower(m2.CreatedAt.Format("2006-01-02T15:04:05.999999Z07:00")) // RFC 3339 allows t and z
	require.Equal(t, []int64{m4.Seq, m3.Seq}, foundSeqs(a.search(t, q("after="+url.QueryEscape(after)))))
	require.Equal(t, []int64{m1.Seq}, foundSeqs(a.search(t, q("before="+url.QueryEscape(m2.CreatedAt.Format("2006-01-02T15:04:05.999999Z07:00"))))))
	require.Empty(t, foundSeqs(a.search(t, q("conversation_id=999999"))))

	// The snippet is the body, tags left out (ts_headline drops them), the
	// matched word marked; no markup comes from the server.
	var text strings.Builder
	var marked []string
	for _, s := range all.Results[3].Snippet {
		text.WriteString(s.Text)
		if s.Match {
			marked = append(marked, s.Text)
		}
	}
	require.Equal(t, []string{"alpha"}, marked)
	require.Contains(t, text.String(), "plain")
	require.NotContains(t, text.String(), "\ue000")

	// Pages: one at a time, in the same order, then no cursor.
	var paged []int64
	query := q("limit=1&order=relevance")
	for i := 0; ; i++ {
		require.Less(t, i, 10)
		res := a.search(t, query)
		paged = append(paged, foundSeqs(res)...)
		if res.NextCursor == "" {
			break
		}
		require.Equal(t, i == 0, res.EstimatedTotal != nil, "the first page alone has an estimate")
		// A cursor of one order is refused by the other.
		r := a.do(t, "GET", "/v1/search?"+q("cursor="+res.NextCursor), nil)
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r)
		query = q("limit=1&order=relevance&cursor=" + res.NextCursor)
	}
	require.ElementsMatch(t, foundSeqs(all), paged)

	// Read mode changes nothing of what a member finds.
	setReadFanout(t, tg, cid, true)
	m6 := a.send(t, cid, "alpha in read mode")
	require.Equal(t, []int64{m6.Seq, m4.Seq, m3.Seq, m2.Seq, m1.Seq}, foundSeqs(b.search(t, q(""))))

	// Bad questions: 400 in the error shape.
	for _, bad := range []string{"", "q=", "q=%20%20", "q=" + strings.Repeat("x", 257), "q=" + url.QueryEscape(strings.Repeat("a ", 17)),
		"q=a&q=b", "q=a%00b", "q=%ff", "q=a&limit=0", "q=a&limit=101", "q=a&after=yesterday", "q=a&after_seq=3",
		"q=a&conversation_id=0", "q=a&sender_id=-1", "q=a&order=oldest", "q=a&prefix=maybe", "q=a&has_attachment=1",
		"q=a&cursor=xyz", "q=a&mentions_me=yes",
		// Well-formed cursors of keys no search issues (found by the fuzzer:
		// a time beyond PostgreSQL's range was a 500).
		"q=a&cursor=" + encodeCursor(false, searchKey{at: math.MaxInt64, cid: 1, seq: 1}),
		"q=a&cursor=" + encodeCursor(false, searchKey{at: 0, cid: -1, seq: 1}),
		"q=a&order=relevance&cursor=" + encodeCursor(true, searchKey{rank: float32(math.Inf(1)), cid: 1, seq: 1})} {
		r := a.do(t, "GET", "/v1/search?"+bad, nil)
		require.Equal(t, http.StatusBadRequest, r.status, "%q: %s", bad, r)
		require.Equal(t, protocol.CodeBadRequest, errCode(t, r), "%q", bad)
	}
}

// TestSearchAfterConfigSwitch: once inboxd migrate --search-config
// switches the configuration, a running gateway searches with the new
// one at once (its statements are not cached with the old one folded
// in), and the messages are found by their stems.
func TestSearchAfterConfigSwitch(t *testing.T) {
	tg := newGateway(t, nil)
	a := tg.user(t, 1)
	cid := a.create(t, "stems", 2)
	m := a.send(t, cid, "the dogs were running")
	// More than five times: PostgreSQL would then keep a generic plan of a
	// cached statement.
	for range 8 {
		require.Empty(t, foundSeqs(a.search(t, "q=run&prefix=false")), "simple does not stem")
	}
	require.Equal(t, []int64{m.Seq}, foundSeqs(a.search(t, "q=the&prefix=false")))
	for _, pool := range tg.env.Pools {
		_, err := migrations.SetSearchConfig(context.Background(), pool, "english")
		require.NoError(t, err)
	}
	require.Equal(t, []int64{m.Seq}, foundSeqs(a.search(t, "q=run&prefix=false")))
	require.Equal(t, []int64{m.Seq}, foundSeqs(a.search(t, "q=runs&prefix=false")), "the query is stemmed too")
	res := a.search(t, "q=the&prefix=false")
	require.Empty(t, foundSeqs(res), "a stop word of english finds nothing")
	require.EqualValues(t, 0, *res.EstimatedTotal)
}

// TestSearchAnyQuery: q of any bytes, tsquery's own syntax, quotes and
// scripts mixed, answers 200 or a 400 in the error shape, never a 5xx:
// no byte of q reaches PostgreSQL as syntax.
func TestSearchAnyQuery(t *testing.T) {
	tg := newGateway(t, nil)
	a := tg.user(t, 1)
	cid := a.create(t, "any", 2)
	a.send(t, cid, `it's a "quoted" & (grouped) | !negated <-> word:* 中文搜索 한국어 O'Brien e-mail@x.org \back\slash`)
	pieces := []string{"a", "word", "中", "文搜", "한", "'", "''", `"`, `\`, "&", "|", "!", "<->", "<2>", ":*", ":", "*", "(", ")",
		" ", "  ", "\t", "\n", "-", "@", ".", "%", "_", "\u00a0", "\u200b", "é", "e\u0301", "😀", "\ue000", "\ue001", "\x01", "\xff", "\xc3",
		"O'Brien", "e-mail@x.org", "1e3", "0x1F", "NULL", "'; DROP TABLE messages; --", "$1", "::regconfig"}
	rng := mrand.New(mrand.NewPCG(1, 2))
	statuses := map[int]int{}
	for i := 0; i < 2000; i++ {
		var b strings.Builder
		for n := 1 + rng.IntN(12); n > 0; n-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		params := url.Values{"q": {b.String()}}
		if rng.IntN(3) == 0 {
			params.Set("order", "relevance")
		}
		if rng.IntN(4) == 0 {
			params.Set("prefix", "false")
		}
		r := a.do(t, "GET", "/v1/search?"+params.Encode(), nil)
		statuses[r.status]++
		switch r.status {
		case http.StatusOK:
			var res protocol.SearchResults
			r.decode(t, &res)
		case http.StatusBadRequest:
			require.Equal(t, protocol.CodeBadRequest, errCode(t, r), "%q", b.String())
		default:
			t.Fatalf("q %q: %s", b.String(), r)
		}
	}
	t.Logf("answers by status: %v", statuses)
	require.Positive(t, statuses[http.StatusOK])
}
