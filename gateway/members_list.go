package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Members are listed by user id from the current-member index; the page
// token is the last user id of the previous page.
const sqlMembers = `SELECT user_id, joined_seq, role FROM member_spans
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
	pg, err := g.memberPage(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	out := protocol.MemberList{ConversationID: pg.cid, Members: []protocol.Member{}}
	err = pg.read(ctx, g.srv.Conv(pg.cid), sqlMembers, []any{pg.cid, pg.after, pg.limit + 1}, func(rs pgx.Rows) (int64, error) {
		var m protocol.Member
		err := rs.Scan(&m.UserID, &m.JoinedSeq, &m.Role)
		out.Members = append(out.Members, m)
		return m.UserID, err
	})
	if err != nil {
		return err
	}
	out.Members, out.NextPage = cut(pg, out.Members)
	apierr.WriteJSON(w, http.StatusOK, out)
	return nil
}

// memberPage is one page of a list of a conversation's members by user id
// (members, receipts): the caller must be a current member.
type memberPage struct {
	cid, limit, after int64
	last              []int64 // the user ids read, in order
}

// memberPage parses {cid}, limit and page (the last user id of the previous
// page) and checks that the caller is a current member.
func (g *Gateway) memberPage(r *http.Request) (*memberPage, error) {
	pg, err := g.pageOf(r)
	if err != nil {
		return nil, err
	}
	ctx := r.Context()
	if err := g.requireMember(ctx, userFrom(ctx), pg.cid); err != nil {
		return nil, err
	}
	return pg, nil
}

// pageOf parses {cid}, limit and page, for any caller.
func (g *Gateway) pageOf(r *http.Request) (*memberPage, error) {
	cid, err := pathID(r, "cid")
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	limit, err := queryInt(q, "limit", DefaultMemberPage, 1, MaxMemberPage)
	if err != nil {
		return nil, err
	}
	after, err := queryInt(q, "page", 0, 0, math.MaxInt64)
	if err != nil {
		return nil, apierr.BadRequest("page must be a next_page of an earlier answer")
	}
	return &memberPage{cid: cid, limit: limit, after: after}, nil
}

// read runs sql and scans each row with scan, which returns the row's user id.
func (pg *memberPage) read(ctx context.Context, db *pgxpool.Pool, sql string, args []any, scan func(pgx.Rows) (int64, error)) error {
	rs, err := db.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("members of %d: %w", pg.cid, err)
	}
	defer rs.Close()
	for rs.Next() {
		id, err := scan(rs)
		if err != nil {
			return fmt.Errorf("members of %d: %w", pg.cid, err)
		}
		pg.last = append(pg.last, id)
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("members of %d: %w", pg.cid, err)
	}
	return nil
}

// cut trims items (one per user id read) to the page and returns the
// next_page token, nil on the last page.
func cut[T any](pg *memberPage, items []T) ([]T, *string) {
	if int64(len(items)) <= pg.limit {
		return items, nil
	}
	next := strconv.FormatInt(pg.last[pg.limit-1], 10)
	return items[:pg.limit], &next
}
