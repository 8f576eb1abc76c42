package gateway

import (
	"fmt"
	"net/http"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// Conversation settings (docs/protocol.md, "Frozen and slow mode"): as for
// roles, the gateway answers early what the projection would refuse, with
// the same rules (projection/settings.go), and the projection judges every
// conversation.updated at its log position.

// handleUpdateConversation is PATCH /v1/conversations/{cid}: a member
// renames, freezes or unfreezes, or sets the slow mode of the
// conversation, as projection.MayUpdate allows. 202 once the conversation
// has the settings (or up to AckWait after the append); a change_id (or
// Idempotency-Key) makes a retry answer as the first call.
func (g *Gateway) handleUpdateConversation(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	cid, req, err := g.updateRequest(w, r)
	if err != nil {
		return err
	}
	change, err := changeID(r, req.ChangeID)
	if err != nil {
		return err
	}
	e := updateEvent(cid, user, req)
	if change != "" {
		// A retry makes the same event, which the projection applies
		// once; one already settled is answered as it was.
		e.EventID = userChangeID(user, "update", change, cid, 0)
		out, done, err := g.members.UpdateOutcome(ctx, e)
		if err != nil {
			return err
		}
		if ok, err := answerSettled(w, out, done, func(reason string) error { return updateRefusal(reason, e) }); ok {
			return err
		}
	}
	rc, err := g.roles(ctx, cid, user, 0)
	if err != nil {
		return err
	}
	if what := projection.MayUpdate(rc.actor, rc.enforced, e.Title != "", e.Frozen != nil, e.SlowMode != nil); what != "" {
		return forbidden(rc.actor, what, cid)
	}
	return g.updateConversation(w, r, e, user)
}

// handleServerUpdateConversation is PATCH /v1/server/conversations/{cid}
// (scope conversations): the service, as itself, changes any setting. Its
// event id derives from the Idempotency-Key.
func (g *Gateway) handleServerUpdateConversation(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	k, idem, _, err := serverWrite(r)
	if err != nil {
		return err
	}
	cid, req, err := g.updateRequest(w, r)
	if err != nil {
		return err
	}
	if req.ChangeID != "" {
		return apierr.BadRequest("the server API takes the Idempotency-Key, not change_id")
	}
	e := updateEvent(cid, 0, req)
	e.EventID, e.Service = derivedID(k, "update", idem, cid), k.Actor()
	out, done, err := g.members.UpdateOutcome(ctx, e)
	if err != nil {
		return err
	}
	if ok, err := answerSettled(w, out, done, func(reason string) error { return updateRefusal(reason, e) }); ok {
		return err
	}
	if _, err := g.roles(ctx, cid, 0, 0); err != nil {
		return err // 404
	}
	return g.updateConversation(w, r, e, 0)
}

// updateRequest reads {cid} and the body of a settings change: at least
// one setting, a title of 1..DefaultMaxTitle bytes of text, a slow mode
// of 0..events.MaxSlowMode seconds.
func (g *Gateway) updateRequest(w http.ResponseWriter, r *http.Request) (cid int64, req protocol.UpdateConversation, err error) {
	if cid, err = pathID(r, "cid"); err != nil {
		return
	}
	if err = g.decodeBody(w, r, &req); err != nil {
		return
	}
	switch {
	case req.Title == nil && req.Frozen == nil && req.SlowMode == nil:
		err = apierr.BadRequest("give at least one of title, frozen and slow_mode")
	case req.Title != nil && (*req.Title == "" || len(*req.Title) > DefaultMaxTitle):
		err = apierr.BadRequest("title must be 1..%d bytes", DefaultMaxTitle)
	case req.SlowMode != nil && (*req.SlowMode < 0 || *req.SlowMode > events.MaxSlowMode):
		err = apierr.BadRequest("slow_mode must be 0..%d seconds", events.MaxSlowMode)
	case req.Title != nil:
		err = input.CheckText("title", *req.Title)
	}
	return
}

// updateEvent is the conversation.updated of req by user (0: a service).
func updateEvent(cid, user int64, req protocol.UpdateConversation) *events.Event {
	e := events.New(events.ConversationUpdated, cid, user)
	if req.Title != nil {
		e.Title = *req.Title
	}
	e.Frozen, e.SlowMode = req.Frozen, req.SlowMode
	return e
}

// updateConversation appends e and answers 202 once it is settled, or the
// projection's refusal.
func (g *Gateway) updateConversation(w http.ResponseWriter, r *http.Request, e *events.Event, watch int64) error {
	out, err := g.members.UpdateConversation(r.Context(), e, watch)
	if err != nil {
		return err
	}
	return answerOutcome(w, out, func(reason string) error { return updateRefusal(reason, e) })
}

// updateRefusal is the client's error for a settings change the
// projection refused (or would).
func updateRefusal(reason string, e *events.Event) error {
	return conversationRefusal(reason, e, "this change of its settings", fmt.Sprintf("change of conversation %d", e.ConversationID))
}
