package gateway

import (
	"net/http"
	"unicode/utf8"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
	"github.com/inboxd/inboxd/gateway/write"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

func writeAccepted(w http.ResponseWriter) {
	apierr.WriteJSON(w, http.StatusAccepted, protocol.Accepted{Status: protocol.StatusAccepted})
}

// handleCreate is POST /v1/conversations. The id comes from the
// conversation_ids sequence, so the event's key is known before the append.
// It answers 201 once the append is acknowledged (the creation is then
// certain), after waiting up to AckWait for the projection so that an
// immediate follow-up (a send) finds the conversation.
func (g *Gateway) handleCreate(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	var req protocol.CreateConversation
	if err := g.decodeBody(w, r, &req); err != nil {
		return err
	}
	if len(req.Title) > DefaultMaxTitle || !utf8.ValidString(req.Title) {
		return apierr.BadRequest("title must be UTF-8 of at most %d bytes", DefaultMaxTitle)
	}
	if err := input.CheckText("title", req.Title); err != nil {
		return err
	}
	if len(req.Members) > g.cfg.MaxMembers {
		return apierr.BadRequest("at most %d members", g.cfg.MaxMembers)
	}
	for _, m := range req.Members {
		if m <= 0 {
			return apierr.BadRequest("members must be positive user ids")
		}
	}
	if err := g.refuseBlocked(ctx, user, req.Members); err != nil {
		return err // a user blocked by a member does not start a conversation with it
	}
	cid, err := g.members.NextConversationID(ctx)
	if err != nil {
		return err
	}
	e := events.New(events.ConversationCreated, cid, user)
	e.Title, e.Members, e.Channel, e.Roles = req.Title, req.Members, req.Channel, g.rolesOf(req)
	if err := g.members.Create(ctx, e); err != nil {
		return err
	}
	apierr.WriteJSON(w, http.StatusCreated, protocol.ConversationCreated{ConversationID: cid})
	return nil
}

// handleAddMember is POST /v1/conversations/{cid}/members: 202 once the
// member.added events (one, or one per id of user_ids) are appended. Like
// every write below, it first waits up to AckWait for the projection
// (write.Members), so that the caller's next request (the new member's
// first send, a list) sees the change; the answer is 202 either way.
func (g *Gateway) handleAddMember(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	cid, err := pathID(r, "cid")
	if err != nil {
		return err
	}
	var req protocol.AddMember
	if err := g.decodeBody(w, r, &req); err != nil {
		return err
	}
	ids, err := addMemberIDs(&req)
	if err != nil {
		return err
	}
	rc, err := g.roles(ctx, cid, user, 0)
	if err != nil {
		return err
	}
	if !projection.MayAdd(rc.actor, rc.enforced) {
		return forbidden(rc.actor, "add members", cid)
	}
	if rc.frozen && !projection.WritesWhileFrozen(rc.actor) {
		return write.FrozenError(cid)
	}
	if err := g.refuseBanned(ctx, cid, ids); err != nil {
		return err
	}
	if err := g.refuseBlocked(ctx, user, ids); err != nil {
		return err
	}
	evs := make([]*events.Event, len(ids))
	for i, id := range ids {
		evs[i] = events.New(events.MemberAdded, cid, user)
		evs[i].UserID = id
	}
	// In read mode the caller gets no entry of the join: the
	// conversation's notifications wake the wait too.
	if err := g.members.ChangeMembers(ctx, evs, user, true); err != nil {
		return err
	}
	writeAccepted(w)
	return nil
}

// MaxBulkMembers bounds the user_ids of one POST .../members.
const MaxBulkMembers = 1000

// addMemberIDs is the ids a POST .../members adds: exactly one of user_id
// and user_ids (1..MaxBulkMembers distinct positive ids).
func addMemberIDs(req *protocol.AddMember) ([]int64, error) {
	switch {
	case req.UserIDs != nil && req.UserID != 0:
		return nil, apierr.BadRequest("give user_id or user_ids, not both")
	case req.UserIDs == nil:
		if req.UserID <= 0 {
			return nil, apierr.BadRequest("user_id must be a positive integer")
		}
		return []int64{req.UserID}, nil
	case len(req.UserIDs) == 0 || len(req.UserIDs) > MaxBulkMembers:
		return nil, apierr.BadRequest("user_ids must hold 1..%d ids", MaxBulkMembers)
	}
	seen := make(map[int64]bool, len(req.UserIDs))
	for _, id := range req.UserIDs {
		if id <= 0 {
			return nil, apierr.BadRequest("user_ids must be positive integers")
		}
		if seen[id] {
			return nil, apierr.BadRequest("user_ids must be distinct (%d is repeated)", id)
		}
		seen[id] = true
	}
	return req.UserIDs, nil
}

// handleRemoveMember is DELETE /v1/conversations/{cid}/members/{uid}: any
// current member may remove itself (leave), an admin or the owner a member
// of a lower role (projection.MayRemove; any member, in a conversation
// created before roles). Removing a user who is not a member changes
// nothing and still answers 202.
func (g *Gateway) handleRemoveMember(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	cid, err := pathID(r, "cid")
	if err != nil {
		return err
	}
	uid, err := pathID(r, "uid")
	if err != nil {
		return err
	}
	rc, err := g.roles(ctx, cid, user, uid)
	if err != nil {
		return err
	}
	if uid != user && rc.target != "" && !projection.MayRemove(rc.actor, rc.target, rc.enforced) {
		return forbidden(rc.actor, "remove a "+rc.target, cid)
	}
	e := events.New(events.MemberRemoved, cid, user)
	e.UserID = uid
	// In read mode the caller gets no entry of the removal (only the
	// removed member does): the conversation's notifications wake the wait.
	if err := g.members.ChangeMembers(ctx, []*events.Event{e}, user, true); err != nil {
		return err
	}
	writeAccepted(w)
	return nil
}

// handleRecord is PATCH /v1/conversations/{cid}/record.
func (g *Gateway) handleRecord(w http.ResponseWriter, r *http.Request) error {
	cid, err := pathID(r, "cid")
	if err != nil {
		return err
	}
	return g.setRecord(w, r, userFrom(r.Context()), cid, nil)
}

// setRecord changes user's record of cid as r's body (a SetRecord) says,
// and answers 202: the change of PATCH .../record, and of the server
// API's for a user. stamp, when set, marks the event (a service's).
func (g *Gateway) setRecord(w http.ResponseWriter, r *http.Request, user, cid int64, stamp func(*events.Event)) error {
	ctx := r.Context()
	var req protocol.SetRecord
	if err := g.decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.Pinned == nil && req.Muted == nil {
		return apierr.BadRequest("give pinned and/or muted")
	}
	if err := g.requireMember(ctx, user, cid); err != nil {
		return err
	}
	e := events.New(events.RecordUpdated, cid, user)
	e.Pinned, e.Muted = req.Pinned, req.Muted
	if stamp != nil {
		stamp(e)
	}
	if err := g.members.ChangeRecord(ctx, e); err != nil {
		return err
	}
	writeAccepted(w)
	return nil
}

// handleRead is POST /v1/conversations/{cid}/read. A seq beyond the
// conversation's last is capped by the projector; a seq at or below the
// current read position changes nothing.
func (g *Gateway) handleRead(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	cid, err := pathID(r, "cid")
	if err != nil {
		return err
	}
	var req protocol.MarkRead
	if err := g.decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.Seq == nil || *req.Seq < 0 {
		return apierr.BadRequest("seq must be a non-negative integer")
	}
	if err := g.requireMember(ctx, user, cid); err != nil {
		return err
	}
	e := events.New(events.ReadUpdated, cid, user)
	e.ReadSeq = req.Seq
	if err := g.members.ChangeRecord(ctx, e); err != nil {
		return err
	}
	writeAccepted(w)
	return nil
}
