package gateway

import (
	"context"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/apikey"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
	"github.com/inboxd/inboxd/gateway/write"
	"github.com/inboxd/inboxd/protocol"
)

// The server API's writes. Each is the user path's event, made by the
// service: Service names the key, ActorID is the user it acts for or 0
// when it acts as itself (events.Event). Their ids derive from the
// Idempotency-Key (derivedID), so a retried call makes the same events,
// which the projection applies once, and answers the same.

// handleServerCreate is POST /v1/server/conversations (scope
// conversations): a conversation of the given members (1..MaxMembers),
// created by the service, which is no member of it. 201 with its id,
// also for a retry (the same id).
func (g *Gateway) handleServerCreate(w http.ResponseWriter, r *http.Request) error {
	ctx, k := r.Context(), serviceFrom(r.Context())
	idem, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	var req protocol.CreateConversation
	if err := g.decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := g.checkServerCreate(&req); err != nil {
		return err
	}
	eventID := derivedID(k, "create", idem)
	if cid, err := g.members.CreatedBy(ctx, eventID); err != nil || cid != 0 {
		if cid != 0 {
			replayed(w)
			apierr.WriteJSON(w, http.StatusCreated, protocol.ConversationCreated{ConversationID: cid})
		}
		return err
	}
	cid, err := g.members.KeyedConversationID(ctx, eventID)
	if err != nil {
		return err
	}
	e := events.New(events.ConversationCreated, cid, 0)
	e.EventID, e.Service = eventID, k.Actor()
	e.Title, e.Members, e.Channel, e.Roles = req.Title, req.Members, req.Channel, g.rolesOf(req)
	// Every member gets the creation. A concurrent call with the same key
	// may have won: the answer is the conversation the event id made,
	// whichever call appended it.
	made, err := g.members.CreateAs(ctx, e, req.Members[0])
	if err != nil {
		return err
	}
	if made == 0 {
		made = cid // not projected within AckWait: the append is certain
	} else if made != cid {
		replayed(w)
	}
	apierr.WriteJSON(w, http.StatusCreated, protocol.ConversationCreated{ConversationID: made})
	return nil
}

// checkServerCreate checks a server create's body as handleCreate does,
// and requires a member: the service is none.
func (g *Gateway) checkServerCreate(req *protocol.CreateConversation) error {
	if len(req.Title) > DefaultMaxTitle || !utf8.ValidString(req.Title) {
		return apierr.BadRequest("title must be UTF-8 of at most %d bytes", DefaultMaxTitle)
	}
	if err := input.CheckText("title", req.Title); err != nil {
		return err
	}
	if len(req.Members) == 0 || len(req.Members) > g.cfg.MaxMembers {
		return apierr.BadRequest("members must hold 1..%d user ids", g.cfg.MaxMembers)
	}
	for _, m := range req.Members {
		if m <= 0 {
			return apierr.BadRequest("members must be positive user ids")
		}
	}
	return nil
}

const sqlConversationExists = `SELECT EXISTS (SELECT 1 FROM conversations WHERE id = $1)`

// requireConversation answers 404 unless conversation cid exists.
func (g *Gateway) requireConversation(ctx context.Context, cid int64) error {
	var ok bool
	if err := g.srv.Conv(cid).QueryRow(ctx, sqlConversationExists, cid).Scan(&ok); err != nil {
		return fmt.Errorf("conversation %d: %w", cid, err)
	}
	if !ok {
		return apierr.NotFound("conversation %d does not exist", cid)
	}
	return nil
}

// handleServerAddMembers is POST /v1/server/conversations/{cid}/members
// (scope members): 202 once the member.added events are appended (and,
// up to AckWait, projected).
func (g *Gateway) handleServerAddMembers(w http.ResponseWriter, r *http.Request) error {
	return g.serverMembers(w, r, events.MemberAdded)
}

// handleServerRemoveMembers is POST
// /v1/server/conversations/{cid}/members/remove (scope members).
func (g *Gateway) handleServerRemoveMembers(w http.ResponseWriter, r *http.Request) error {
	return g.serverMembers(w, r, events.MemberRemoved)
}

// serverMembers appends one event of typ per user id, made by the
// service as itself, and waits as handleAddMember does. Adding a member
// twice, or removing a non-member, changes nothing.
func (g *Gateway) serverMembers(w http.ResponseWriter, r *http.Request, typ string) error {
	ctx := r.Context()
	k, idem, cid, err := serverWrite(r)
	if err != nil {
		return err
	}
	var req protocol.ServerMembers
	if err := g.decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.UserIDs == nil {
		return apierr.BadRequest("user_ids must hold 1..%d ids", MaxBulkMembers)
	}
	ids, err := addMemberIDs(&protocol.AddMember{UserIDs: req.UserIDs})
	if err != nil {
		return err
	}
	if err := g.requireConversation(ctx, cid); err != nil {
		return err
	}
	if typ == events.MemberAdded {
		if err := g.refuseBanned(ctx, cid, ids); err != nil {
			return err // a service lifts a ban first, as the projection requires
		}
	}
	evs := make([]*events.Event, len(ids))
	for i, id := range ids {
		evs[i] = events.New(typ, cid, 0)
		evs[i].EventID, evs[i].Service, evs[i].UserID = derivedID(k, typ, idem, cid, id), k.Actor(), id
	}
	// The last user gets its join or removal, in either mode.
	if err := g.members.ChangeMembers(ctx, evs, evs[len(evs)-1].UserID, false); err != nil {
		return err
	}
	writeAccepted(w)
	return nil
}

// handleServerSend is POST /v1/server/conversations/{cid}/messages (scope
// messages): the send path of users (sender.send), as the member AsUser
// or as the named system sender SenderName (sender_id 0). The msg_id
// derives from the Idempotency-Key. 201 with the message, also for a
// retry (with Idempotent-Replayed); 202 when not projected within
// AckWait.
func (g *Gateway) handleServerSend(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	k, idem, cid, err := serverWrite(r)
	if err != nil {
		return err
	}
	var req protocol.ServerSend
	if err := g.decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := checkServerSender(&req); err != nil {
		return err
	}
	msgID := derivedID(k, "send", idem, cid)
	res, err := g.sends.SendAs(ctx, req.AsUser, write.SendRequest{ConversationID: cid, MsgID: msgID, Body: req.Body,
		ReplyTo: req.ReplyTo, Mentions: req.Mentions, MentionAll: req.MentionAll}, func(e *events.Event) {
		e.Service, e.SenderName = k.Actor(), req.SenderName
	})
	if err != nil {
		return err
	}
	switch res.Status {
	case write.Pending:
		apierr.WriteJSON(w, http.StatusAccepted, protocol.SendPending{MsgID: msgID, Status: protocol.StatusPending})
		return nil
	case write.Duplicate:
		replayed(w)
	}
	apierr.WriteJSON(w, http.StatusCreated, res.Message)
	return nil
}

// checkServerSender checks that a server send names exactly one sender.
func checkServerSender(req *protocol.ServerSend) error {
	switch {
	case req.AsUser < 0:
		return apierr.BadRequest("as_user must be a positive user id")
	case (req.AsUser == 0) == (req.SenderName == ""):
		return apierr.BadRequest("give exactly one of as_user and sender_name")
	case len(req.SenderName) > events.MaxSenderName:
		return apierr.BadRequest("sender_name must be at most %d bytes", events.MaxSenderName)
	}
	return input.CheckText("sender_name", req.SenderName)
}

// handleServerRecord is PATCH /v1/server/users/{uid}/conversations/{cid}/record
// (scope records): the user's record change (setRecord), made by the
// service for it. Setting what a record already is changes nothing, so a
// retry is harmless; its event id still derives from the Idempotency-Key.
func (g *Gateway) handleServerRecord(w http.ResponseWriter, r *http.Request) error {
	k, idem, cid, err := serverWrite(r)
	if err != nil {
		return err
	}
	uid, err := pathID(r, "uid")
	if err != nil {
		return err
	}
	return g.setRecord(w, r, uid, cid, func(e *events.Event) {
		e.EventID, e.Service = derivedID(k, "record", idem, uid, cid), k.Actor()
	})
}

// serverWrite is what every server API write on a conversation reads
// first: its key, its Idempotency-Key and the {cid} of its path.
func serverWrite(r *http.Request) (k *apikey.Key, idem string, cid int64, err error) {
	k = serviceFrom(r.Context())
	if idem, err = idempotencyKey(r); err != nil {
		return nil, "", 0, err
	}
	if cid, err = pathID(r, "cid"); err != nil {
		return nil, "", 0, err
	}
	return k, idem, cid, nil
}
