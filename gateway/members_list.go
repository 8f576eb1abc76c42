package gateway

import (
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

// Members are listed by user id from the current-member index; the page
// token is the last user id of the previous page.
const sqlMembers = `SELECT user_id, joined_seq FROM member_spans
WHERE conversation_id = $1 AND left_seq IS NULL AND user_id > $2
ORDER BY user_id LIMIT $3`

// DefaultMemberPage and MaxMemberPage bound GET .../members?limit=.
const (
	DefaultMemberPage = 100
	MaxMemberPage     = 1000
)

// handleMembers is GET /v1/conversations/{cid}/members: the current
// members, for current members only (403), of a conversation that exists
// (404).
func (g *Gateway) handleMembers(w http.ResponseWriter, r *http.Request) error {
	cid, err := pathID(r, "cid")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, err := queryInt(q, "limit", DefaultMemberPage, 1, MaxMemberPage)
	if err != nil {
		return err
	}
	after, err := queryInt(q, "page", 0, 0, math.MaxInt64)
	if err != nil {
		return apierr.BadRequest("page must be a next_page of an earlier answer")
	}
	ctx := r.Context()
	if err := g.requireMember(ctx, userFrom(ctx), cid); err != nil {
		return err
	}
	rows, err := g.pool.Query(ctx, sqlMembers, cid, after, limit+1)
	if err != nil {
		return fmt.Errorf("members of %d: %w", cid, err)
	}
	defer rows.Close()
	out := protocol.MemberList{ConversationID: cid, Members: []protocol.Member{}}
	for rows.Next() {
		var m protocol.Member
		if err := rows.Scan(&m.UserID, &m.JoinedSeq); err != nil {
			return fmt.Errorf("members of %d: %w", cid, err)
		}
		out.Members = append(out.Members, m)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("members of %d: %w", cid, err)
	}
	if len(out.Members) > int(limit) {
		out.Members = out.Members[:limit]
		next := strconv.FormatInt(out.Members[limit-1].UserID, 10)
		out.NextPage = &next
	}
	apierr.WriteJSON(w, http.StatusOK, out)
	return nil
}
