package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/inboxd/inboxd/protocol"
)

// Member is a current member of a conversation (protocol.Member).
type Member = protocol.Member

// Members reads the current members of a conversation (every page), by
// ascending user id. Only a current member may ask (403 otherwise).
func (c *Client) Members(ctx context.Context, conversationID int64) ([]Member, error) {
	var out []Member
	q := url.Values{}
	for {
		var page protocol.MemberList
		_, _, err := c.api.do(ctx, http.MethodGet, "/v1/conversations/"+strconv.FormatInt(conversationID, 10)+"/members", q,
			nil, nil, &page, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Members...)
		if page.NextPage == nil {
			return out, nil
		}
		q.Set("page", *page.NextPage)
	}
}
