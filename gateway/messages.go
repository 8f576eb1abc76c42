package gateway

import (
	"context"
	"fmt"
	"net/http"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
	"github.com/inboxd/inboxd/gateway/write"
	"github.com/inboxd/inboxd/protocol"
)

const sqlMembership = `SELECT EXISTS (SELECT 1 FROM conversations WHERE id = $1),
	EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $1 AND user_id = $2 AND left_seq IS NULL)`

// requireMember fails unless conversation cid exists (404) and user is a
// current member of it (403).
func (g *Gateway) requireMember(ctx context.Context, user, cid int64) error {
	var exists, member bool
	if err := g.srv.Conv(cid).QueryRow(ctx, sqlMembership, cid, user).Scan(&exists, &member); err != nil {
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
	res, err := g.sends.Send(r.Context(), userFrom(r.Context()), write.SendRequest{ConversationID: cid, MsgID: msgID,
		Body: req.Body, ReplyTo: req.ReplyTo, Mentions: req.Mentions, MentionAll: req.MentionAll,
		Attachments: req.Attachments})
	if err != nil {
		return err
	}
	switch res.Status {
	case write.Projected:
		apierr.WriteJSON(w, http.StatusCreated, res.Message)
	case write.Duplicate:
		apierr.WriteJSON(w, http.StatusOK, res.Message)
	default:
		apierr.WriteJSON(w, http.StatusAccepted, protocol.SendPending{MsgID: res.MsgID, Status: protocol.StatusPending})
	}
	return nil
}
