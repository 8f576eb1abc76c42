package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
)

// TestSearch: the client's search against a real gateway finds what the
// words, a phrase, a prefix and each filter say, pages through 25 results
// in pages of 10 with no result twice and none skipped (the first page
// alone estimating the total), and leaves out the messages of a blocked
// sender.
func TestSearch(t *testing.T) {
	w := newWorld(t, nil, nil)
	ctx := context.Background()
	alice := w.direct(t, 1)
	a := w.lgCreate(t, 1, "team", false, 2, 3)
	b := w.lgCreate(t, 1, "pair", false, 2)
	send := func(user, cid int64, text string, mentions ...int64) int64 {
		t.Helper()
		seq := w.lgSend(t, user, cid, text, mentions...)
		require.NotZero(t, seq, "projected within the ack wait")
		return seq
	}
	fox := send(2, a, "the quick brown fox jumps")
	lunch := send(2, a, "lunch at noon tomorrow?")
	helloWorld := send(2, a, "hello world")
	helloThere := send(3, a, "hello there")
	peace := send(2, b, "world peace")
	ping := send(3, a, "ping about the release", 1)
	var items []int64
	for i := range 25 {
		items = append(items, send(1+int64(i%2), b, fmt.Sprintf("page item %d", i)))
	}

	type hit struct{ cid, seq int64 }
	hits := func(p *client.SearchPage) []hit {
		out := []hit{}
		for _, r := range p.Results {
			out = append(out, hit{r.Message.ConversationID, r.Message.Seq})
		}
		return out
	}
	search := func(q client.SearchQuery) *client.SearchPage {
		t.Helper()
		p, err := alice.Search(ctx, q)
		require.NoError(t, err, "%+v", q)
		return p
	}
	id := func(v int64) *int64 { return &v }

	// Words: every one must match, in any order and place; newest first.
	require.Equal(t, []hit{{a, fox}}, hits(search(client.SearchQuery{Q: "fox quick"})))
	require.Equal(t, []hit{{b, peace}, {a, helloWorld}}, hits(search(client.SearchQuery{Q: "world"})))
	p := search(client.SearchQuery{Q: "hello", NoPrefix: true})
	require.Equal(t, []hit{{a, helloThere}, {a, helloWorld}}, hits(p))
	require.Equal(t, int64(2), *p.EstimatedTotal)
	require.Empty(t, p.NextCursor)
	require.Equal(t, "[hello] there", client.SnippetText(p.Results[0].Snippet, func(s string) string { return "[" + s + "]" }))
	require.Positive(t, p.Results[0].Rank)
	require.Equal(t, `"hello there"`, string(p.Results[0].Message.Body), "the message as history serves it")

	// A phrase: its words in order, next to each other.
	require.Equal(t, []hit{{a, fox}}, hits(search(client.SearchQuery{Q: `"brown fox"`})))
	require.Empty(t, hits(search(client.SearchQuery{Q: `"quick fox"`})))

	// The last word is a prefix unless NoPrefix.
	require.Equal(t, []hit{{a, lunch}}, hits(search(client.SearchQuery{Q: "noon lun"})))
	require.Empty(t, hits(search(client.SearchQuery{Q: "noon lun", NoPrefix: true})))

	// Filters.
	require.Equal(t, []hit{{a, helloThere}}, hits(search(client.SearchQuery{Q: "hello", SenderID: id(3)})))
	require.Equal(t, []hit{{b, peace}}, hits(search(client.SearchQuery{Q: "world", ConversationID: b})))
	require.Equal(t, []hit{{a, ping}}, hits(search(client.SearchQuery{Q: "release", MentionsMe: true})))
	require.Empty(t, hits(search(client.SearchQuery{Q: "release", MentionsMe: true, SenderID: id(2)})))
	require.Equal(t, []hit{{b, peace}, {a, helloWorld}}, hits(search(client.SearchQuery{Q: "world", HasAttachment: new(false)})))
	require.Empty(t, hits(search(client.SearchQuery{Q: "world", HasAttachment: new(true)})))
	require.Equal(t, []hit{{b, items[3]}}, hits(search(client.SearchQuery{Q: "item", ConversationID: b,
		AfterSeq: id(items[2]), BeforeSeq: id(items[4])})))

	// Paging: 25 results in pages of 10, newest first, each once.
	var got []hit
	var sizes []int
	var totals []*int64
	for page, err := range alice.SearchPages(ctx, client.SearchQuery{Q: "page item", Limit: 10}) {
		require.NoError(t, err)
		got = append(got, hits(page)...)
		sizes = append(sizes, len(page.Results))
		totals = append(totals, page.EstimatedTotal)
	}
	require.Equal(t, []int{10, 10, 5}, sizes)
	require.Equal(t, int64(25), *totals[0])
	require.Nil(t, totals[1], "the total is on the first page only")
	require.Nil(t, totals[2])
	var want []hit
	for _, seq := range slices.Backward(items) {
		want = append(want, hit{b, seq})
	}
	require.Equal(t, want, got, "every item once, newest first")

	// Relevance order pages the same set (the ranks may tie).
	var byRank []hit
	last := 2.0
	for page, err := range alice.SearchPages(ctx, client.SearchQuery{Q: "item", Order: client.SearchRelevance, Limit: 7}) {
		require.NoError(t, err)
		for _, r := range page.Results {
			require.LessOrEqual(t, r.Rank, last, "highest rank first")
			last = r.Rank
		}
		byRank = append(byRank, hits(page)...)
	}
	require.ElementsMatch(t, want, byRank)

	// Time bounds: strictly after / before a message's time.
	all := search(client.SearchQuery{Q: "item", Limit: 100}).Results
	mid := all[12].Message.CreatedAt
	var after, before []hit
	for _, r := range all {
		if r.Message.CreatedAt.After(mid) {
			after = append(after, hit{r.Message.ConversationID, r.Message.Seq})
		}
		if r.Message.CreatedAt.Before(mid) {
			before = append(before, hit{r.Message.ConversationID, r.Message.Seq})
		}
	}
	require.NotEmpty(t, after)
	require.NotEmpty(t, before)
	require.Equal(t, after, hits(search(client.SearchQuery{Q: "item", Limit: 100, After: mid})))
	require.Equal(t, before, hits(search(client.SearchQuery{Q: "item", Limit: 100, Before: mid})))
	require.Empty(t, hits(search(client.SearchQuery{Q: "item", After: time.Now().Add(time.Hour)})))

	// A bad parameter is the server's 400; a blank query never leaves.
	_, err := alice.Search(ctx, client.SearchQuery{Q: "item", AfterSeq: id(1)})
	var apiErr *client.APIError
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, 400, apiErr.Status)
	_, err = alice.Search(ctx, client.SearchQuery{Q: "  "})
	require.Error(t, err)

	// A blocked sender's messages never come back.
	require.NoError(t, alice.BlockUser(ctx, 3))
	waitFor(t, 30*time.Second, "the block listed", func() bool {
		bs, err := alice.Blocks(ctx)
		require.NoError(t, err)
		return len(bs) == 1
	})
	require.Equal(t, []hit{{a, helloWorld}}, hits(search(client.SearchQuery{Q: "hello"})))
	require.Empty(t, hits(search(client.SearchQuery{Q: "release"})))
	bob := w.direct(t, 2)
	bp, err := bob.Search(ctx, client.SearchQuery{Q: "hello"})
	require.NoError(t, err)
	require.Equal(t, []hit{{a, helloThere}, {a, helloWorld}}, hits(bp), "another member still finds them")
}
