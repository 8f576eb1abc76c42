package client

import (
	"context"

	"github.com/inboxd/inboxd/protocol"
)

// Counts are the user's unread and mention totals (protocol.Counts), as
// the server counted them at a head: UnreadTotal over the conversations
// that are not muted, MentionTotal over all. Each record carries its own
// (Record.UnreadCount, Record.MentionCount).
type Counts = protocol.Counts

// Receipt is a member's read position in a conversation: it has read
// every message up to ReadSeq (its own messages and its join included).
type Receipt struct {
	ConversationID int64
	UserID         int64
	ReadSeq        int64
}

// Counts returns the totals of the latest sync answer, WebSocket welcome
// or too_long the client read (zero before the first). A badge shows them;
// they are the server's, at the head of that answer.
func (c *Client) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts
}

// noteCounts keeps the totals of an answer and tells Handler.OnCounts when
// they changed.
func (c *Client) noteCounts(n Counts) {
	c.mu.Lock()
	changed := n != c.counts
	c.counts = n
	c.mu.Unlock()
	if changed && c.cfg.Handler.OnCounts != nil {
		c.cfg.Handler.OnCounts(n)
	}
}

// noteReceipt hands a receipt frame to Handler.OnReceipt.
func (c *Client) noteReceipt(f *protocol.ServerFrame) {
	if h := c.cfg.Handler.OnReceipt; h != nil {
		h(Receipt{ConversationID: f.ConversationID, UserID: f.UserID, ReadSeq: f.ReadSeq})
	}
}

// Receipts reads the read positions of the members of a conversation who
// show them (every page), by ascending user id; the caller's own is always
// there. Only a current member may ask (403 otherwise). Later moves come
// to Handler.OnReceipt while a WebSocket is connected.
func (c *Client) Receipts(ctx context.Context, conversationID int64) ([]Receipt, error) {
	return memberPages(ctx, c, conversationID, "receipts", func(p *protocol.ReceiptList) ([]Receipt, *string) {
		out := make([]Receipt, len(p.Receipts))
		for i, r := range p.Receipts {
			out[i] = Receipt{ConversationID: conversationID, UserID: r.UserID, ReadSeq: r.ReadSeq}
		}
		return out, p.NextPage
	})
}
