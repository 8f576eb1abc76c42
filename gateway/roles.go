package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// Roles (docs/protocol.md, "Roles"): the gateway answers early what the
// projection would refuse, with the same rules (projection/roles.go), read
// from the projection; the projection still judges every event at its log
// position, so a change racing another (a removal, a transfer) is refused
// there and answered by the wait.

// sqlRoles reads whether conversation $1 has roles, and the roles of users
// $2 and $3 ("" when not a current member), and whether it is frozen; no
// row: no conversation.
const sqlRoles = `SELECT c.roles, c.frozen,
	COALESCE((SELECT role FROM member_spans WHERE conversation_id = $1 AND user_id = $2 AND left_seq IS NULL), ''),
	COALESCE((SELECT role FROM member_spans WHERE conversation_id = $1 AND user_id = $3 AND left_seq IS NULL), '')
FROM conversations c WHERE c.id = $1`

// roleCheck is what sqlRoles read: the actor's and the target's roles.
type roleCheck struct {
	enforced      bool
	frozen        bool // the conversation is frozen (docs/protocol.md, "Frozen and slow mode")
	actor, target string
}

// roles reads the roles of actor (who must be a member: 403 not_member)
// and target in cid (404 when it does not exist).
func (g *Gateway) roles(ctx context.Context, cid, actor, target int64) (roleCheck, error) {
	var rc roleCheck
	err := g.srv.Conv(cid).QueryRow(ctx, sqlRoles, cid, actor, target).Scan(&rc.enforced, &rc.frozen, &rc.actor, &rc.target)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return rc, apierr.NotFound("conversation %d does not exist", cid)
	case err != nil:
		return rc, fmt.Errorf("roles of users %d and %d in %d: %w", actor, target, cid, err)
	case actor != 0 && rc.actor == "":
		return rc, apierr.NotMember("user %d is not a member of conversation %d", actor, cid)
	}
	return rc, nil
}

// forbidden is the answer to what the actor's role does not allow.
func forbidden(role, what string, cid int64) error {
	return apierr.Forbidden("a %s of conversation %d may not %s", role, cid, what)
}

// handleSetRole is PUT /v1/conversations/{cid}/members/{uid}/role: the
// caller sets another member's role as projection.MaySetRole allows.
// 202 once the member has the role (or up to AckWait after the append);
// a change_id (or Idempotency-Key) makes a retry answer as the first call.
func (g *Gateway) handleSetRole(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	cid, uid, req, err := g.roleRequest(w, r)
	if err != nil {
		return err
	}
	change, err := changeID(r, req.ChangeID)
	if err != nil {
		return err
	}
	e := events.New(events.MemberRoleSet, cid, user)
	e.UserID, e.Role = uid, req.Role
	if change != "" {
		// One already settled is answered as it was.
		e.EventID = userChangeID(user, "role", change, cid, uid)
		out, done, err := g.members.RoleOutcome(ctx, e)
		if err != nil {
			return err
		}
		if ok, err := answerSettled(w, out, done, func(reason string) error { return roleRefusal(reason, e) }); ok {
			return err
		}
	}
	rc, err := g.roles(ctx, cid, user, uid)
	if err != nil {
		return err
	}
	switch {
	case rc.target == "":
		return roleRefusal(projection.ReasonNoMember, e)
	case user == uid:
		return apierr.Forbidden("a member may not set its own role")
	case !projection.MaySetRole(rc.actor, rc.target, req.Role):
		return forbidden(rc.actor, fmt.Sprintf("make a %s a %s", rc.target, req.Role), cid)
	}
	return g.setRole(w, r, e, user)
}

// handleServerSetRole is PUT
// /v1/server/conversations/{cid}/members/{uid}/role (scope members): the
// service, as itself, gives a member any role (owner: the conversation's
// owner before it, if any, becomes an admin). Its event id derives from
// the Idempotency-Key.
func (g *Gateway) handleServerSetRole(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	k, idem, _, err := serverWrite(r)
	if err != nil {
		return err
	}
	cid, uid, req, err := g.roleRequest(w, r)
	if err != nil {
		return err
	}
	if req.ChangeID != "" {
		return apierr.BadRequest("the server API takes the Idempotency-Key, not change_id")
	}
	e := events.New(events.MemberRoleSet, cid, 0)
	e.EventID, e.Service, e.UserID, e.Role = derivedID(k, "role", idem, cid, uid), k.Actor(), uid, req.Role
	rc, err := g.roles(ctx, cid, 0, uid)
	if err != nil {
		return err
	}
	if rc.target == "" {
		return roleRefusal(projection.ReasonNoMember, e)
	}
	return g.setRole(w, r, e, uid)
}

// roleRequest reads {cid}, {uid} and the body of a role change.
func (g *Gateway) roleRequest(w http.ResponseWriter, r *http.Request) (cid, uid int64, req protocol.SetRole, err error) {
	if cid, err = pathID(r, "cid"); err != nil {
		return
	}
	if uid, err = pathID(r, "uid"); err != nil {
		return
	}
	if err = g.decodeBody(w, r, &req); err != nil {
		return
	}
	if !events.ValidRole(req.Role) {
		err = apierr.BadRequest("role must be one of %s", strings.Join(events.Roles, ", "))
	}
	return
}

// setRole appends e and answers 202 once it is settled, or the
// projection's refusal.
func (g *Gateway) setRole(w http.ResponseWriter, r *http.Request, e *events.Event, watch int64) error {
	out, err := g.members.SetRole(r.Context(), e, watch)
	if err != nil {
		return err
	}
	return answerOutcome(w, out, func(reason string) error { return roleRefusal(reason, e) })
}

// roleRefusal is the client's error for a role change the projection
// refused (or would).
func roleRefusal(reason string, e *events.Event) error {
	return conversationRefusal(reason, e, "this role change", "role change")
}

// rolesOf says whether a conversation created by req enforces roles: as
// it asks, else as the deployment does (Config.ConversationRoles).
func (g *Gateway) rolesOf(req protocol.CreateConversation) bool {
	if req.Roles != nil {
		return *req.Roles
	}
	return g.cfg.ConversationRoles
}
