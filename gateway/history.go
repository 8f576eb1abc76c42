package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"

	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/rows"
	"github.com/inboxd/inboxd/protocol"
)

// historyMode is which question GET .../messages asks: older messages
// (before, the default), newer ones (after) or the changed ones
// (changed_after, docs/large-conversations.md).
type historyMode uint8

const (
	historyBefore historyMode = iota
	historyAfter
	historyChanged
)

// sqlHistoryOf reads the messages the user may see: those within one of
// its membership spans (joined_seq..left_seq inclusive), one index range
// per span; cond bounds them ($3) and order sorts them, LIMIT $4.
func sqlHistoryOf(cond, order string) string {
	return `SELECT ` + rows.MessageColsFor("$2") + `
FROM member_spans s
CROSS JOIN LATERAL (
	SELECT * FROM messages m
	WHERE m.conversation_id = s.conversation_id AND m.seq >= s.joined_seq
		AND m.seq <= COALESCE(s.left_seq, 9223372036854775807) AND ` + cond + `
	ORDER BY ` + order + ` LIMIT $4
) m
WHERE s.conversation_id = $1 AND s.user_id = $2
ORDER BY ` + order + `
LIMIT $4`
}

// The three reads of history. changed_ord > 0 is spelled out so that the
// planner can use the partial index messages_changed.
var sqlHistory = [...]string{
	historyBefore:  sqlHistoryOf(`m.seq < $3`, `m.seq DESC`),
	historyAfter:   sqlHistoryOf(`m.seq > $3`, `m.seq`),
	historyChanged: sqlHistoryOf(`m.changed_ord > $3 AND m.changed_ord > 0`, `m.changed_ord`),
}

const sqlEverMember = `SELECT EXISTS (SELECT 1 FROM conversations WHERE id = $1),
	EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $1 AND user_id = $2)`

// history returns up to limit messages of cid visible to user and whether
// more exist beyond them: before pos (ascending; more: older ones), after
// pos (ascending) or changed after pos (by changed_ord).
func (g *Gateway) history(ctx context.Context, user, cid int64, mode historyMode, pos int64, limit int) ([]protocol.Message, bool, error) {
	var exists, member bool
	if err := g.srv.Conv(cid).QueryRow(ctx, sqlEverMember, cid, user).Scan(&exists, &member); err != nil {
		return nil, false, fmt.Errorf("membership of user %d in %d: %w", user, cid, err)
	}
	if !exists {
		return nil, false, apierr.NotFound("conversation %d does not exist", cid)
	}
	if !member {
		return nil, false, apierr.NotMember("user %d was never a member of conversation %d", user, cid)
	}
	rs, err := g.srv.Conv(cid).Query(ctx, sqlHistory[mode], cid, user, pos, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("history of %d for user %d: %w", cid, user, err)
	}
	defer rs.Close()
	var msgs []protocol.Message
	for rs.Next() {
		var s rows.MessageScan
		if err := rs.Scan(s.Targets()...); err != nil {
			return nil, false, fmt.Errorf("history of %d: %w", cid, err)
		}
		msgs = append(msgs, *s.Message())
	}
	if err := rs.Err(); err != nil {
		return nil, false, fmt.Errorf("history of %d: %w", cid, err)
	}
	more := len(msgs) > limit
	if more {
		msgs = msgs[:limit]
	}
	blocked, err := g.blocks.of(ctx, user)
	if err != nil {
		return nil, false, err
	}
	msgs = inbox.MaskMessages(msgs, blocked) // docs/protocol.md, "Blocks"
	if mode != historyBefore {
		if msgs == nil {
			msgs = []protocol.Message{}
		}
		return msgs, more, nil
	}
	out := make([]protocol.Message, len(msgs))
	for i, m := range msgs {
		out[len(msgs)-1-i] = m
	}
	return out, more, nil
}

// historyQuery reads the question of GET .../messages: at most one of
// before, after and changed_after, and the limit.
func (g *Gateway) historyQuery(r *http.Request) (historyMode, int64, int, error) {
	q := r.URL.Query()
	mode, pos := historyBefore, int64(math.MaxInt64)
	n := 0
	for _, p := range []struct {
		name string
		mode historyMode
		min  int64
	}{{"before", historyBefore, 1}, {"after", historyAfter, 0}, {"changed_after", historyChanged, 0}} {
		if _, ok := q[p.name]; !ok {
			continue
		}
		n++
		v, err := queryInt(q, p.name, 0, p.min, math.MaxInt64)
		if err != nil {
			return 0, 0, 0, err
		}
		mode, pos = p.mode, v
	}
	if n > 1 {
		return 0, 0, 0, apierr.BadRequest("before, after and changed_after exclude each other")
	}
	limit, err := queryInt(q, "limit", int64(g.cfg.PageDefault), 1, int64(g.cfg.PageMax))
	if err != nil {
		return 0, 0, 0, err
	}
	return mode, pos, int(limit), nil
}

// handleHistory is GET /v1/conversations/{cid}/messages.
func (g *Gateway) handleHistory(w http.ResponseWriter, r *http.Request) error {
	cid, err := pathID(r, "cid")
	if err != nil {
		return err
	}
	mode, pos, limit, err := g.historyQuery(r)
	if err != nil {
		return err
	}
	msgs, more, err := g.history(r.Context(), userFrom(r.Context()), cid, mode, pos, limit)
	if err != nil {
		return err
	}
	apierr.WriteJSON(w, http.StatusOK, protocol.History{Messages: msgs, HasMore: more})
	return nil
}
