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
	return memberPages(ctx, c, conversationID, "members", func(p *protocol.MemberList) ([]Member, *string) {
		return p.Members, p.NextPage
	})
}

// memberPages reads every page of a list of a conversation's members
// (GET /v1/conversations/{cid}/<what>): items returns a page's items and
// its next_page.
func memberPages[P any, T any](ctx context.Context, c *Client, conversationID int64, what string, items func(*P) ([]T, *string)) ([]T, error) {
	var out []T
	q := url.Values{}
	for {
		var page P
		_, _, err := c.api.do(ctx, http.MethodGet, "/v1/conversations/"+strconv.FormatInt(conversationID, 10)+"/"+what, q,
			nil, nil, &page, 0)
		if err != nil {
			return nil, err
		}
		got, next := items(&page)
		out = append(out, got...)
		if next == nil {
			return out, nil
		}
		q.Set("page", *next)
	}
}
