package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
	"github.com/inboxd/inboxd/gateway/internal/rows"
	"github.com/inboxd/inboxd/gateway/ws"
	"github.com/inboxd/inboxd/protocol"
)

const sqlMembership = `SELECT EXISTS (SELECT 1 FROM conversations WHERE id = $1),
	EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $1 AND user_id = $2 AND left_seq IS NULL)`

// requireMember fails unless conversation cid exists (404) and user is a
// current member of it (403).
func (g *Gateway) requireMember(ctx context.Context, user, cid int64) error {
	var exists, member bool
	if err := g.pool.QueryRow(ctx, sqlMembership, cid, user).Scan(&exists, &member); err != nil {
		return fmt.Errorf("membership of user %d in %d: %w", user, cid, err)
	}
	if !exists {
		return apierr.NotFound("conversation %d does not exist", cid)
	}
	if !member {
		return apierr.NotMember("user %d is not a member of conversation %d", user, cid)
	}
	return nil
}

// handleSend is POST /v1/conversations/{cid}/messages.
func (g *Gateway) handleSend(w http.ResponseWriter, r *http.Request) error {
	cid, err := pathID(r, "cid")
	if err != nil {
		return err
	}
	var req protocol.SendMessage
	if err := g.decodeBody(w, r, &req); err != nil {
		return err
	}
	msgID := req.MsgID
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		k, err := input.ParseMsgID(key)
		if err != nil {
			return apierr.BadRequest("Idempotency-Key must be a uuid")
		}
		if msgID != "" {
			m, err := input.ParseMsgID(msgID)
			if err != nil {
				return err
			}
			if m != k {
				return apierr.BadRequest("msg_id and Idempotency-Key differ")
			}
		}
		msgID = k
	}
	if msgID == "" {
		return apierr.BadRequest("msg_id (or the Idempotency-Key header) is required")
	}
	if msgID, err = input.ParseMsgID(msgID); err != nil {
		return err
	}
	res, err := g.sends.send(r.Context(), userFrom(r.Context()), ws.SendRequest{ConversationID: cid, MsgID: msgID,
		Body: req.Body, ReplyTo: req.ReplyTo, Mentions: req.Mentions, MentionAll: req.MentionAll})
	if err != nil {
		return err
	}
	switch res.status {
	case sendProjected:
		apierr.WriteJSON(w, http.StatusCreated, res.message)
	case sendDuplicate:
		apierr.WriteJSON(w, http.StatusOK, res.message)
	default:
		apierr.WriteJSON(w, http.StatusAccepted, protocol.SendPending{MsgID: res.msgID, Status: protocol.StatusPending})
	}
	return nil
}

// sqlHistory reads the messages before a seq that the user may see: those
// within one of its membership spans (joined_seq..left_seq inclusive),
// newest first, one index range per span.
var sqlHistory = `SELECT ` + rows.MessageColsFor("$2") + `
FROM member_spans s
CROSS JOIN LATERAL (
	SELECT * FROM messages m
	WHERE m.conversation_id = s.conversation_id AND m.seq >= s.joined_seq
		AND m.seq <= COALESCE(s.left_seq, 9223372036854775807) AND m.seq < $3
	ORDER BY m.seq DESC LIMIT $4
) m
WHERE s.conversation_id = $1 AND s.user_id = $2
ORDER BY m.seq DESC
LIMIT $4`

const sqlEverMember = `SELECT EXISTS (SELECT 1 FROM conversations WHERE id = $1),
	EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $1 AND user_id = $2)`

// history returns up to limit messages of cid with seq < before visible to
// user, ascending, and whether older visible ones exist.
func (g *Gateway) history(ctx context.Context, user, cid, before int64, limit int) ([]protocol.Message, bool, error) {
	var exists, member bool
	if err := g.pool.QueryRow(ctx, sqlEverMember, cid, user).Scan(&exists, &member); err != nil {
		return nil, false, fmt.Errorf("membership of user %d in %d: %w", user, cid, err)
	}
	if !exists {
		return nil, false, apierr.NotFound("conversation %d does not exist", cid)
	}
	if !member {
		return nil, false, apierr.NotMember("user %d was never a member of conversation %d", user, cid)
	}
	rs, err := g.pool.Query(ctx, sqlHistory, cid, user, before, limit+1)
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
	out := make([]protocol.Message, len(msgs))
	for i, m := range msgs {
		out[len(msgs)-1-i] = m
	}
	return out, more, nil
}

// handleHistory is GET /v1/conversations/{cid}/messages.
func (g *Gateway) handleHistory(w http.ResponseWriter, r *http.Request) error {
	cid, err := pathID(r, "cid")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	before, err := queryInt(q, "before", math.MaxInt64, 1, math.MaxInt64)
	if err != nil {
		return err
	}
	limit, err := queryInt(q, "limit", int64(g.cfg.PageDefault), 1, int64(g.cfg.PageMax))
	if err != nil {
		return err
	}
	msgs, more, err := g.history(r.Context(), userFrom(r.Context()), cid, before, int(limit))
	if err != nil {
		return err
	}
	apierr.WriteJSON(w, http.StatusOK, protocol.History{Messages: msgs, HasMore: more})
	return nil
}
