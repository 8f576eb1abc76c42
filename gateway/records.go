package gateway

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/rows"
	"github.com/inboxd/inboxd/gateway/internal/servers"
	"github.com/inboxd/inboxd/protocol"
)

// listParams asks for one page of a user's records.
type listParams struct {
	limit        int
	page         *pageToken
	sinceVersion int64 // with hasSince: only records with version > sinceVersion
	hasSince     bool
}

// pageToken is the opaque next_page: a keyset position, so a conversation
// moving while a client pages can only appear twice (it moved down) or be
// skipped because it moved up, which is a change after the head the client
// took and so arrives through sync.
type pageToken struct {
	byVersion bool
	version   int64     // byVersion: last version returned
	pinned    bool      // else: last (pinned, activity, conversation id) returned
	activity  time.Time // microsecond precision, as PostgreSQL keeps it
	conv      int64
	// number is a 1-based page number (page=2 asks for the second page of
	// limit records), accepted beside the keyset tokens for clients that
	// count pages; it is an offset, so it can shift when records move.
	number int64
}

func (t pageToken) String() string {
	var s string
	if t.byVersion {
		s = "v." + strconv.FormatInt(t.version, 10)
	} else {
		p := "0"
		if t.pinned {
			p = "1"
		}
		s = "o." + p + "." + strconv.FormatInt(t.activity.UnixMicro(), 10) + "." + strconv.FormatInt(t.conv, 10)
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func parsePageToken(s string) (*pageToken, error) {
	bad := apierr.BadRequest("page is not a next_page value of this API nor a page number")
	// Strict, as every number of the query (queryInt): no sign.
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && len(s) <= 7 && s[0] != '+' {
		if n < 1 {
			return nil, bad
		}
		return &pageToken{number: n}, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, bad
	}
	parts := strings.Split(string(raw), ".")
	num := func(s string) (int64, bool) {
		v, err := strconv.ParseInt(s, 10, 64)
		return v, err == nil && v >= 0
	}
	switch {
	case len(parts) == 2 && parts[0] == "v":
		v, ok := num(parts[1])
		if !ok {
			return nil, bad
		}
		return &pageToken{byVersion: true, version: v}, nil
	case len(parts) == 4 && parts[0] == "o" && (parts[1] == "0" || parts[1] == "1"):
		us, ok1 := num(parts[2])
		c, ok2 := num(parts[3])
		if !ok1 || !ok2 {
			return nil, bad
		}
		return &pageToken{pinned: parts[1] == "1", activity: time.UnixMicro(us), conv: c}, nil
	}
	return nil, bad
}

// sqlListRecords is one page of a user's records, pinned first, then by the
// time of the last message the user can see, newest first. Removed records
// are included (removed: true): their history up to the removal stays
// readable. $2..$4 is the keyset position after which to continue (NULLs on
// the first page), $5 the limit. The page is chosen from the records and
// their conversations alone (a current member's last visible message is
// the conversation's last, at last_at); only its rows are then read out
// whole, with their counts.
var sqlListRecords = `SELECT ` + rows.RecordCols + `, x.activity
FROM (` + sqlListOrder + `
) x
JOIN records r ON r.user_id = x.user_id AND r.conversation_id = x.conversation_id` + rows.RecordJoins + `
ORDER BY x.pinned DESC, x.activity DESC, x.conversation_id DESC`

// sqlListOrder chooses the page of sqlListRecords (same parameters): the
// records' keys in list order with their activity. On a sharded placement
// each server answers it for the conversations it holds, from the copies of
// the user's records there (listSharded).
const sqlListOrder = `SELECT * FROM (
		SELECT r.user_id, r.conversation_id, r.pinned, CASE WHEN NOT r.removed THEN c.last_at
			ELSE COALESCE((SELECT m.created_at FROM messages m WHERE m.conversation_id = r.conversation_id
				AND m.seq = (SELECT max(s.left_seq) FROM member_spans s
					WHERE s.conversation_id = r.conversation_id AND s.user_id = r.user_id)), c.created_at) END AS activity
		FROM records r JOIN conversations c ON c.id = r.conversation_id
		WHERE r.user_id = $1
	) a
	WHERE $2::boolean IS NULL OR (a.pinned, a.activity, a.conversation_id) < ($2::boolean, $3::timestamptz, $4::bigint)
	ORDER BY a.pinned DESC, a.activity DESC, a.conversation_id DESC
	LIMIT $5 OFFSET $6`

// sqlRecordsSince is one page of the records changed after a version, in
// version order, removals included.
var sqlRecordsSince = `SELECT ` + rows.RecordCols + `
FROM records r` + rows.RecordJoins + `
WHERE r.user_id = $1 AND r.version > $2
ORDER BY r.version
LIMIT $3 OFFSET $4`

// listRecords reads one page of user's records and the next_page token
// (nil on the last page). It is the list behind GET /v1/conversations and
// the too-long answers. On several servers it is listSharded.
func listRecords(ctx context.Context, srv *servers.Servers, user int64, p listParams) ([]protocol.Record, *string, error) {
	byVersion := p.hasSince || (p.page != nil && p.page.byVersion)
	var offset int64
	if p.page != nil && p.page.number > 0 {
		offset = (p.page.number - 1) * int64(p.limit)
		p.page = nil
	}
	if srv.Sharded() {
		return listSharded(ctx, srv, user, p, byVersion, offset)
	}
	db := srv.Pools[0]
	var rs pgx.Rows
	var err error
	if byVersion {
		since := p.sinceVersion
		if p.page != nil {
			since = p.page.version
		}
		rs, err = db.Query(ctx, sqlRecordsSince, user, since, p.limit+1, offset)
	} else {
		var pinned, activity, conv any
		if p.page != nil {
			pinned, activity, conv = p.page.pinned, p.page.activity, p.page.conv
		}
		rs, err = db.Query(ctx, sqlListRecords, user, pinned, activity, conv, p.limit+1, offset)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list records of user %d: %w", user, err)
	}
	defer rs.Close()
	recs := []protocol.Record{}
	var last pageToken
	for rs.Next() {
		var s rows.RecordScan
		targets := s.Targets()
		var activity time.Time
		if !byVersion {
			targets = append(targets, &activity)
		}
		if err := rs.Scan(targets...); err != nil {
			return nil, nil, fmt.Errorf("list records of user %d: %w", user, err)
		}
		if len(recs) == p.limit {
			tok := last.String()
			return recs, &tok, nil
		}
		rec := s.Record()
		recs = append(recs, *rec)
		last = pageToken{byVersion: byVersion, version: rec.Version, pinned: rec.Pinned, activity: activity, conv: rec.ConversationID}
	}
	if err := rs.Err(); err != nil {
		return nil, nil, fmt.Errorf("list records of user %d: %w", user, err)
	}
	return recs, nil, nil
}

const sqlUserHead = `SELECT (SELECT epoch FROM meta), COALESCE(u.inbox_seq, 0), COALESCE(u.record_version, 0)
FROM (SELECT 1) one LEFT JOIN users u ON u.id = $1`

// handleList is GET /v1/conversations.
func (g *Gateway) handleList(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	q := r.URL.Query()
	limit, err := queryInt(q, "limit", int64(g.cfg.PageDefault), 1, int64(g.cfg.PageMax))
	if err != nil {
		return err
	}
	p := listParams{limit: int(limit)}
	if _, ok := q["since_version"]; ok {
		if p.sinceVersion, err = queryInt(q, "since_version", 0, 0, math.MaxInt64); err != nil {
			return err
		}
		p.hasSince = true
	}
	if vs, ok := q["page"]; ok {
		if len(vs) != 1 {
			return apierr.BadRequest("parameter page given more than once")
		}
		if p.page, err = parsePageToken(vs[0]); err != nil {
			return err
		}
		if p.hasSince && !p.page.byVersion && p.page.number == 0 {
			return apierr.BadRequest("page belongs to a list without since_version")
		}
	}
	// The head (and record version) before the list: a change committed
	// in between is in the list and after the head, never in neither.
	var resp protocol.ConversationList
	if err := g.srv.User(user).QueryRow(ctx, sqlUserHead, user).Scan(&resp.Epoch, &resp.InboxHead, &resp.RecordVersion); err != nil {
		return fmt.Errorf("head of user %d: %w", user, err)
	}
	if resp.Conversations, resp.NextPage, err = listRecords(ctx, g.srv, user, p); err != nil {
		return err
	}
	blocked, err := g.blocks.of(ctx, user)
	if err != nil {
		return err
	}
	resp.Conversations = inbox.MaskRecords(resp.Conversations, blocked) // docs/protocol.md, "Blocks"
	apierr.WriteJSON(w, http.StatusOK, resp)
	return nil
}
