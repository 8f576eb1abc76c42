package client_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
)

// The SDK's side of the counts and receipts: SendWith carries
// mentions, Counts/OnCounts follow the server's totals over the WebSocket
// (welcome) and over long-polling (sync answers), OnReceipt hears another
// member's read live, Receipts reads them all.
func TestCountsAndReceipts(t *testing.T) {
	noClientGoroutines(t)
	w := newWorld(t, nil, nil)
	ctx := context.Background()
	aa := newApp()
	alice, err := client.New(w.config(t, w.url, 1, aa))
	require.NoError(t, err)
	start(t, alice, aa)
	cid, err := alice.CreateConversation(ctx, "counts", 2)
	require.NoError(t, err)

	var mu sync.Mutex
	var counts []client.Counts
	var receipts []client.Receipt
	ba := newApp()
	bcfg := w.config(t, w.url, 2, ba)
	bcfg.Transport = client.TransportWebSocket
	bcfg.Handler.OnCounts = func(n client.Counts) { mu.Lock(); counts = append(counts, n); mu.Unlock() }
	bcfg.Handler.OnReceipt = func(r client.Receipt) { mu.Lock(); receipts = append(receipts, r); mu.Unlock() }
	bob, err := client.New(bcfg)
	require.NoError(t, err)

	// Two messages to bob, one mentioning him, before he connects: his
	// welcome carries the totals.
	id, err := alice.SendWith(ctx, cid, "@bob hello", client.SendOptions{Mentions: []int64{2}})
	require.NoError(t, err)
	r, err := alice.WaitSent(ctx, id)
	require.NoError(t, err)
	require.Equal(t, []int64{2}, r.Message.Mentions)
	id, err = alice.SendWith(ctx, cid, "second", client.SendOptions{ReplyTo: r.Message.Seq})
	require.NoError(t, err)
	_, err = alice.WaitSent(ctx, id)
	require.NoError(t, err)
	start(t, bob, ba)
	waitFor(t, 30*time.Second, "bob's totals", func() bool {
		return bob.Counts() == client.Counts{UnreadTotal: 2, MentionTotal: 1}
	})
	mu.Lock()
	require.Equal(t, client.Counts{UnreadTotal: 2, MentionTotal: 1}, counts[len(counts)-1])
	mu.Unlock()
	recs, err := bob.Conversations(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, int64(2), recs[0].UnreadCount)
	require.Equal(t, int64(1), recs[0].MentionCount)

	// Alice reads (she had read her own messages: a read to the same seq is
	// no move); bob reads to the end: alice's client hears it if connected.
	// Here bob hears alice's read of his reply.
	bid, err := bob.Send(ctx, cid, "hi alice")
	require.NoError(t, err)
	br, err := bob.WaitSent(ctx, bid)
	require.NoError(t, err)
	require.NoError(t, alice.MarkRead(ctx, cid, br.Message.Seq))
	waitFor(t, 30*time.Second, "bob hears alice's receipt", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(receipts, client.Receipt{ConversationID: cid, UserID: 1, ReadSeq: br.Message.Seq})
	})
	rs, err := bob.Receipts(ctx, cid)
	require.NoError(t, err)
	require.Equal(t, []client.Receipt{{ConversationID: cid, UserID: 1, ReadSeq: br.Message.Seq},
		{ConversationID: cid, UserID: 2, ReadSeq: br.Message.Seq}}, rs, "bob's send moved his own position")
	recs, err = bob.Conversations(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), recs[0].UnreadCount, "a send reads the conversation")
}
