package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

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
	return c.keyedChange(ctx, http.MethodPut, path, body, nil, "role change", "conversation_id", conversationID, "user_id", userID, "role", role)
}

// keyedChange sends body, which carries a change id made once (or, when
// body is nil, the Idempotency-Key header in hdr), to path and retries the
// temporary failures with the same request, so that a lost answer never
// applies the change twice; what and attrs name it in the log.
func (c *Client) keyedChange(ctx context.Context, method, path string, body any, hdr http.Header, what string, attrs ...any) error {
	pol := newPolicy(&c.cfg, c.newRand())
	for {
		_, _, err := c.api.do(ctx, method, path, nil, body, hdr, nil, 0)
		if err == nil || ctx.Err() != nil || !changeRetryable(err) {
			return err
		}
		wait, _ := pol.failed(err, false, 0)
		c.log.Info(what+" failed, retrying", append(attrs, "err", err, "retry_in", wait)...)
		if !sleepCtx(ctx, wait) {
			return fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		}
	}
}

// Sanction is a ban or mute that stands (protocol.SanctionEntry): its
// user, when it lapses (nil: when lifted), who set it (0: a service) and
// when.
type Sanction = protocol.SanctionEntry

// Ban bans userID from conversationID (docs/protocol.md, "Ban and mute"):
// a member is removed, and nobody may add the user until the ban lapses
// at until (nil: until Unban). A moderator or above bans those of lower
// roles; a refusal is an *APIError (403 forbidden, 403 not_member, 400
// for an until that has passed). Retried as SetRole is.
func (c *Client) Ban(ctx context.Context, conversationID, userID int64, until *time.Time) error {
	return c.sanction(ctx, http.MethodPut, "bans", conversationID, userID, until)
}

// Unban lifts a ban; lifting none changes nothing.
func (c *Client) Unban(ctx context.Context, conversationID, userID int64) error {
	return c.sanction(ctx, http.MethodDelete, "bans", conversationID, userID, nil)
}

// Mute mutes member userID of conversationID until until (nil: until
// Unmute): it keeps reading, and its sends, edits, reactions and typing
// are refused or dropped. As Ban otherwise (404 when userID is no member).
func (c *Client) Mute(ctx context.Context, conversationID, userID int64, until *time.Time) error {
	return c.sanction(ctx, http.MethodPut, "mutes", conversationID, userID, until)
}

// Unmute lifts a mute; lifting none changes nothing.
func (c *Client) Unmute(ctx context.Context, conversationID, userID int64) error {
	return c.sanction(ctx, http.MethodDelete, "mutes", conversationID, userID, nil)
}

// Bans reads the bans that stand in conversationID (every page), for a
// moderator or above (403 forbidden otherwise).
func (c *Client) Bans(ctx context.Context, conversationID int64) ([]Sanction, error) {
	return memberPages(ctx, c, conversationID, "bans", func(p *protocol.SanctionList) ([]Sanction, *string) {
		return p.Sanctions, p.NextPage
	})
}

// Mutes reads the mutes that stand, as Bans reads the bans.
func (c *Client) Mutes(ctx context.Context, conversationID int64) ([]Sanction, error) {
	return memberPages(ctx, c, conversationID, "mutes", func(p *protocol.SanctionList) ([]Sanction, *string) {
		return p.Sanctions, p.NextPage
	})
}

// sanction sets (PUT) or lifts (DELETE) a ban or mute (kind "bans" or
// "mutes") with one change id over its retries.
func (c *Client) sanction(ctx context.Context, method, kind string, conversationID, userID int64, until *time.Time) error {
	if conversationID <= 0 || userID <= 0 {
		return fmt.Errorf("client: bad %s of user %d in %d", kind, userID, conversationID)
	}
	change := uuid.NewString()
	var body any
	hdr := http.Header{}
	if method == http.MethodPut {
		body = protocol.Sanction{Until: until, ChangeID: change}
	} else {
		hdr.Set("Idempotency-Key", change)
	}
	path := "/v1/conversations/" + strconv.FormatInt(conversationID, 10) + "/" + kind + "/" + strconv.FormatInt(userID, 10)
	return c.keyedChange(ctx, method, path, body, hdr, strings.TrimSuffix(kind, "s")+" change",
		"conversation_id", conversationID, "user_id", userID, "method", method)
}

// ConversationSettings are the settings UpdateConversation changes: nil
// fields do not change (docs/protocol.md, "Frozen and slow mode").
type ConversationSettings struct {
	Title    *string // a new title, 1..256 bytes
	Frozen   *bool   // freeze (true) or unfreeze
	SlowMode *int    // seconds a member below moderator waits between its sends; 0 off
}

// UpdateConversation renames, freezes or unfreezes, or sets the slow mode
// of conversationID, as the caller's role allows: renaming an admin or
// the owner where roles are enforced (any member otherwise), freezing an
// admin or the owner, the slow mode a moderator and above. One change id
// is made and kept over the retries of temporary failures (as SetRole),
// so a lost answer never applies the change twice. A refusal is an
// *APIError: 403 forbidden (the caller's role), 403 not_member, 404 (no
// such conversation), 400 (no setting, or one out of range). It does not
// need Run; the new settings reach the records through sync.
func (c *Client) UpdateConversation(ctx context.Context, conversationID int64, s ConversationSettings) error {
	if conversationID <= 0 || s.Title == nil && s.Frozen == nil && s.SlowMode == nil {
		return fmt.Errorf("client: no setting to change in conversation %d", conversationID)
	}
	body := protocol.UpdateConversation{Title: s.Title, Frozen: s.Frozen, SlowMode: s.SlowMode, ChangeID: uuid.NewString()}
	path := "/v1/conversations/" + strconv.FormatInt(conversationID, 10)
	return c.keyedChange(ctx, http.MethodPatch, path, body, nil, "settings change", "conversation_id", conversationID)
}
