package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
	"github.com/inboxd/inboxd/protocol"
)

func writeAccepted(w http.ResponseWriter) {
	apierr.WriteJSON(w, http.StatusAccepted, protocol.Accepted{Status: protocol.StatusAccepted})
}

const (
	sqlNextConversationID = `SELECT nextval('conversation_ids')`
	// The created system message has the event's id as msg_id: it names
	// this creation, not any conversation that might hold the id.
	sqlCreateSettled = `SELECT EXISTS (SELECT 1 FROM messages WHERE msg_id = $2 AND conversation_id = $1),
	EXISTS (SELECT 1 FROM rejections WHERE event_id = $2)`
)

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
	var cid int64
	if err := g.pool.QueryRow(ctx, sqlNextConversationID).Scan(&cid); err != nil {
		return fmt.Errorf("allocate conversation id: %w", err)
	}
	sub := g.hub.SubscribeUser(user)
	defer sub.Close()
	e := events.New(events.ConversationCreated, cid, user)
	e.Title, e.Members, e.Channel = req.Title, req.Members, req.Channel
	if err := g.appender.Append(ctx, e); err != nil {
		return err
	}
	var rejected bool
	if err := g.waitProjected(ctx, sub, func(ctx context.Context) (bool, error) {
		var exists bool
		err := g.pool.QueryRow(ctx, sqlCreateSettled, cid, e.EventID).Scan(&exists, &rejected)
		return exists || rejected, err
	}); err != nil {
		return err
	}
	if rejected {
		// Only possible if the sequence fell behind the log (a restore
		// without replay's setval): a retry allocates a fresh id.
		return apierr.Unavailable("conversation id already taken, retry", time.Second,
			fmt.Errorf("conversation.created %d refused: id exists", cid))
	}
	apierr.WriteJSON(w, http.StatusCreated, protocol.ConversationCreated{ConversationID: cid})
	return nil
}

// waitProjected waits up to AckWait until done reports true, re-checking on
// every wake-up of sub. Running out of time is not an error.
func (g *Gateway) waitProjected(ctx context.Context, sub *hub.Subscription, done func(context.Context) (bool, error)) error {
	timer := time.NewTimer(g.cfg.AckWait)
	defer timer.Stop()
	for {
		if ok, err := done(ctx); err != nil || ok {
			return err
		}
		select {
		case <-sub.C():
		case <-timer.C:
			return nil
		case <-g.draining:
			return nil
		case <-ctx.Done():
			return apierr.ErrClientGone
		}
	}
}

// handleAddMember is POST /v1/conversations/{cid}/members: 202 once the
// member.added events (one, or one per id of user_ids) are appended. Like
// every write below, it first waits up to AckWait for the projection (of
// the last one: the events of a conversation are projected in order), so
// that the caller's next request (the new member's first send, a list)
// sees the change; the answer is 202 either way.
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
	if err := g.requireMember(ctx, user, cid); err != nil {
		return err
	}
	sub := g.hub.SubscribeUser(user)
	defer sub.Close()
	// In read mode the caller gets no entry of the join: the
	// conversation's L token wakes the wait.
	defer g.hub.WatchConversations(sub, []int64{cid})()
	evs := make([]*events.Event, len(ids))
	for i, id := range ids {
		evs[i] = events.New(events.MemberAdded, cid, user)
		evs[i].UserID = id
	}
	if err := g.appender.AppendAll(ctx, evs); err != nil {
		return err
	}
	last := evs[len(evs)-1]
	if err := g.waitProjected(ctx, sub, func(ctx context.Context) (bool, error) {
		return g.memberSettled(ctx, cid, last.UserID, true, last.EventID)
	}); err != nil {
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

const sqlMemberSettled = `SELECT EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $1 AND user_id = $2 AND left_seq IS NULL),
	EXISTS (SELECT 1 FROM rejections WHERE event_id = $3)`

// memberSettled says whether a member change is visible: uid is (or, for a
// removal, is no longer) a current member, or the event was refused.
func (g *Gateway) memberSettled(ctx context.Context, cid, uid int64, member bool, eventID string) (bool, error) {
	var is, rejected bool
	if err := g.pool.QueryRow(ctx, sqlMemberSettled, cid, uid, eventID).Scan(&is, &rejected); err != nil {
		return false, fmt.Errorf("membership of user %d in %d: %w", uid, cid, err)
	}
	return is == member || rejected, nil
}

// handleRemoveMember is DELETE /v1/conversations/{cid}/members/{uid}: any
// current member may remove itself or another member. Removing a user who is
// not a member changes nothing and still answers 202.
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
	if err := g.requireMember(ctx, user, cid); err != nil {
		return err
	}
	sub := g.hub.SubscribeUser(user)
	defer sub.Close()
	// In read mode the caller gets no entry of the removal (only the
	// removed member does): the conversation's L token wakes the wait.
	defer g.hub.WatchConversations(sub, []int64{cid})()
	e := events.New(events.MemberRemoved, cid, user)
	e.UserID = uid
	if err := g.appender.Append(ctx, e); err != nil {
		return err
	}
	if err := g.waitProjected(ctx, sub, func(ctx context.Context) (bool, error) {
		return g.memberSettled(ctx, cid, uid, false, e.EventID)
	}); err != nil {
		return err
	}
	writeAccepted(w)
	return nil
}

const sqlRecordVersion = `SELECT COALESCE((SELECT record_version FROM users WHERE id = $1), 0)`

func (g *Gateway) recordVersion(ctx context.Context, user int64) (int64, error) {
	var v int64
	if err := g.pool.QueryRow(ctx, sqlRecordVersion, user).Scan(&v); err != nil {
		return 0, fmt.Errorf("record version of user %d: %w", user, err)
	}
	return v, nil
}

// sqlRecordSettled: a record change is visible once the user's record
// version moved past the one read before the append, or the record already
// has the asked values (the change was a no-op).
const sqlRecordSettled = `SELECT COALESCE((SELECT record_version FROM users WHERE id = $1), 0) > $3
	OR COALESCE((SELECT ($4::boolean IS NULL OR pinned = $4) AND ($5::boolean IS NULL OR muted = $5)
		FROM records WHERE user_id = $1 AND conversation_id = $2), false)`

// sqlReadSettled is sqlRecordSettled for a read position (capped at the
// conversation's last seq by the projector).
const sqlReadSettled = `SELECT COALESCE((SELECT record_version FROM users WHERE id = $1), 0) > $3
	OR COALESCE((SELECT r.read_seq >= LEAST($4::bigint, c.last_seq)
		FROM records r JOIN conversations c ON c.id = r.conversation_id
		WHERE r.user_id = $1 AND r.conversation_id = $2), false)`

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
	if err := g.appendRecordChange(ctx, e, sqlRecordSettled, req.Pinned, req.Muted); err != nil {
		return err
	}
	writeAccepted(w)
	return nil
}

// appendRecordChange appends e, a change of the actor's own record, and
// waits (up to AckWait, woken by NOTIFY) until settled — a query of (user,
// conversation, record version before the append, args...) — says it is
// projected, so that the caller's next request reads its own write.
func (g *Gateway) appendRecordChange(ctx context.Context, e *events.Event, settled string, args ...any) error {
	user, cid := e.ActorID, e.ConversationID
	sub := g.hub.SubscribeUser(user)
	defer sub.Close()
	v0, err := g.recordVersion(ctx, user)
	if err != nil {
		return err
	}
	if err := g.appender.Append(ctx, e); err != nil {
		return err
	}
	qargs := append([]any{user, cid, v0}, args...)
	return g.waitProjected(ctx, sub, func(ctx context.Context) (bool, error) {
		var done bool
		err := g.pool.QueryRow(ctx, settled, qargs...).Scan(&done)
		return done, err
	})
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
	if err := g.appendRecordChange(ctx, e, sqlReadSettled, *req.Seq); err != nil {
		return err
	}
	writeAccepted(w)
	return nil
}
