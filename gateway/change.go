package gateway

import (
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
	"github.com/inboxd/inboxd/gateway/write"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// changeID reads the change_id of a change request: the body's, or
// the Idempotency-Key header's (equal when both are given).
func changeID(r *http.Request, fromBody string) (string, error) {
	return keyID(r, "change_id", fromBody)
}

// keyID reads a write's idempotency key named field: the body's, or the
// Idempotency-Key header's (equal when both are given).
func keyID(r *http.Request, field, fromBody string) (string, error) {
	id := fromBody
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		k, err := input.ParseMsgID(key)
		if err != nil {
			return "", apierr.BadRequest("Idempotency-Key must be a uuid")
		}
		if id != "" {
			b, err := input.ParseMsgID(id)
			if err != nil {
				return "", apierr.BadRequest("%s must be a uuid", field)
			}
			if b != k {
				return "", apierr.BadRequest("%s and Idempotency-Key differ", field)
			}
		}
		id = k
	}
	return id, nil
}

// userChangeID derives the event id of user's change what (the event
// type, or "role") with change_id change, of member uid in conversation
// cid: a retry makes the same event, which the projection applies once.
func userChangeID(user int64, what, change string, cid, uid int64) string {
	return uuid.NewSHA1(idempotencyNS, []byte(fmt.Sprintf("user\x00%d\x00%s\x00%s\x00%d\x00%d", user, what, change, cid, uid))).String()
}

// answerSettled answers a retry of a change already settled as the first
// call was answered: its refusal (by refusal), or 202 replayed. answered
// is false while the change is not settled (not yet appended, or not yet
// projected), so that the caller goes on as for a first call.
func answerSettled(w http.ResponseWriter, out write.RoleOutcome, done bool, refusal func(string) error) (answered bool, err error) {
	switch {
	case !done:
		return false, nil
	case out.Refused != "":
		return true, refusal(out.Refused)
	case out.Applied:
		replayed(w)
		writeAccepted(w)
		return true, nil
	}
	return false, nil
}

// answerOutcome answers a change that settled: its refusal (by refusal),
// or 202.
func answerOutcome(w http.ResponseWriter, out write.RoleOutcome, refusal func(string) error) error {
	if out.Refused != "" {
		return refusal(out.Refused)
	}
	writeAccepted(w)
	return nil
}

// conversationRefusal is the client's error for a change of a
// conversation's members or settings (e) that the projection refused, or
// would: roleWhat says what the actor's role does not allow, what names
// the change in a refusal for any other reason (a 400).
func conversationRefusal(reason string, e *events.Event, roleWhat, what string) error {
	switch reason {
	case projection.ReasonNoConversation:
		return apierr.NotFound("conversation %d does not exist", e.ConversationID)
	case projection.ReasonNotMember:
		return apierr.NotMember("user %d is not a member of conversation %d", e.ActorID, e.ConversationID)
	case projection.ReasonNoMember:
		return apierr.NotFound("user %d is not a member of conversation %d", e.UserID, e.ConversationID)
	case projection.ReasonRole:
		return apierr.Forbidden("your role in conversation %d does not allow %s", e.ConversationID, roleWhat)
	}
	return apierr.BadRequest("the %s was refused by the projection (%s)", what, reason)
}

// handleChange serves the four change routes: typ is the event type.
func (g *Gateway) handleChange(typ string) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		cid, err := pathID(r, "cid")
		if err != nil {
			return err
		}
		seq, err := pathID(r, "seq")
		if err != nil {
			return err
		}
		req := write.ChangeRequest{Type: typ, ConversationID: cid, Seq: seq}
		var body struct {
			ChangeID string  `json:"change_id"`
			Body     *string `json:"body"`
			Emoji    *string `json:"emoji"`
		}
		if typ == events.MessageEdited || typ == events.ReactionAdded || r.ContentLength != 0 {
			if err := g.decodeBody(w, r, &body); err != nil {
				return err
			}
		}
		switch {
		case typ == events.MessageEdited && body.Body == nil:
			return apierr.BadRequest("body is required")
		case typ == events.ReactionAdded && body.Emoji == nil:
			return apierr.BadRequest("emoji is required")
		case typ != events.MessageEdited && body.Body != nil, typ != events.ReactionAdded && body.Emoji != nil:
			return apierr.BadRequest("unexpected field for this change")
		}
		if body.Body != nil {
			req.Body = *body.Body
		}
		if body.Emoji != nil {
			req.Emoji = *body.Emoji
		}
		if req.ChangeID, err = changeID(r, body.ChangeID); err != nil {
			return err
		}
		m, pending, err := g.changes.Change(r.Context(), userFrom(r.Context()), req)
		if err != nil {
			return err
		}
		if pending {
			apierr.WriteJSON(w, http.StatusAccepted, protocol.ChangePending{ChangeID: req.ChangeID, Status: protocol.StatusPending})
			return nil
		}
		apierr.WriteJSON(w, http.StatusOK, m)
		return nil
	}
}
