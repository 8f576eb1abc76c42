package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/inboxd/inboxd/protocol"
)

// Block is a user the user blocks, since At (protocol.Block).
type Block = protocol.Block

// BlockUser blocks userID (docs/protocol.md, "Blocks"): from when the
// server has projected it, userID's messages reach this user emptied and
// marked (Message.SenderBlocked; left out of the handlers unless
// Config.ShowBlocked), its typing, presence and receipts are not shown,
// and it may not start a conversation with this user or add it to one.
// Blocking a blocked user changes nothing. It does not need Run.
func (c *Client) BlockUser(ctx context.Context, userID int64) error {
	return c.block(ctx, http.MethodPut, userID)
}

// UnblockUser lifts the block of userID; the history shows its messages
// again when read again. Unblocking a user who is not blocked changes
// nothing.
func (c *Client) UnblockUser(ctx context.Context, userID int64) error {
	return c.block(ctx, http.MethodDelete, userID)
}

func (c *Client) block(ctx context.Context, method string, userID int64) error {
	if userID <= 0 {
		return fmt.Errorf("client: bad user id %d", userID)
	}
	_, _, err := c.api.do(ctx, method, "/v1/blocks/"+strconv.FormatInt(userID, 10), nil, nil, nil, nil, 0)
	return err
}

// Blocks lists every user the user blocks, by user id, as the server has
// projected them (a block made a moment ago may be missing).
func (c *Client) Blocks(ctx context.Context) ([]Block, error) {
	out := []Block{}
	page := ""
	for {
		q := url.Values{"limit": {"1000"}}
		if page != "" {
			q.Set("page", page)
		}
		var l protocol.BlockList
		if _, _, err := c.api.do(ctx, http.MethodGet, "/v1/blocks", q, nil, nil, &l, 0); err != nil {
			return nil, err
		}
		out = append(out, l.Blocks...)
		if l.NextPage == nil {
			return out, nil
		}
		page = *l.NextPage
	}
}

// hidden says whether m is left out of what the app is handed: a message
// of a blocked sender, unless Config.ShowBlocked.
func (c *Client) hidden(m *Message) bool {
	return m != nil && m.SenderBlocked && !c.cfg.ShowBlocked
}

// visible is msgs without the hidden ones (msgs itself when none is).
func (c *Client) visible(msgs []Message) []Message {
	for i := range msgs {
		if c.hidden(&msgs[i]) {
			out := make([]Message, 0, len(msgs)-1)
			for j := range msgs {
				if !c.hidden(&msgs[j]) {
					out = append(out, msgs[j])
				}
			}
			return out
		}
	}
	return msgs
}
