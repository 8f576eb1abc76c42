package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/google/uuid"

	"github.com/inboxd/inboxd/protocol"
)

// Member is a current member of a conversation (protocol.Member), with
// its role.
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

// SetRole gives member userID of conversationID the role role ("owner",
// "admin", "moderator" or "member"; docs/protocol.md, "Roles") as the
// caller's own role allows: an owner any role (owner: a transfer), an
// admin moderator or member. One change id is made and kept over the
// retries of temporary failures (as ApplyChange does), so a lost answer
// never applies the change twice. A refusal is an *APIError: 403
// forbidden (the caller's role), 403 not_member, 404 (no such member),
// 400 (an unknown role). It does not need Run.
func (c *Client) SetRole(ctx context.Context, conversationID, userID int64, role string) error {
	if conversationID <= 0 || userID <= 0 || role == "" {
		return fmt.Errorf("client: bad role %q of user %d in %d", role, userID, conversationID)
	}
	body := protocol.SetRole{Role: role, ChangeID: uuid.NewString()}
	path := "/v1/conversations/" + strconv.FormatInt(conversationID, 10) + "/members/" + strconv.FormatInt(userID, 10) + "/role"
	pol := newPolicy(&c.cfg, c.newRand())
	for {
		_, _, err := c.api.do(ctx, http.MethodPut, path, nil, body, nil, nil, 0)
		if err == nil || ctx.Err() != nil || !changeRetryable(err) {
			return err
		}
		wait, _ := pol.failed(err, false, 0)
		c.log.Info("role change failed, retrying", "conversation_id", conversationID, "user_id", userID, "role", role,
			"err", err, "retry_in", wait)
		if !sleepCtx(ctx, wait) {
			return fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		}
	}
}
