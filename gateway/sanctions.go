package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// Bans and mutes (docs/protocol.md, "Ban and mute"): as for roles, the
// gateway answers early what the projection would refuse, with the same
// rules (projection/sanctions.go), and the projection judges every event
// at its log position.

// sanctionRoute is what a PUT or DELETE of .../bans/{uid} or
// .../mutes/{uid} appends.
type sanctionRoute struct {
	typ  string // the event type
	kind string // projection.SanctionBan or SanctionMute
}

// handleSanction is PUT (set) or DELETE (lift) of
// /v1/conversations/{cid}/bans/{uid} and .../mutes/{uid}: a moderator or
// above bans or mutes a user of a lower role (projection.MaySanction), in
// every conversation, roles enforced or not. 202 once settled (or up to
// AckWait after the append); a change_id (or Idempotency-Key) makes a
// retry answer as the first call.
func (g *Gateway) handleSanction(typ string) func(w http.ResponseWriter, r *http.Request) error {
	sr := sanctionRoute{typ: typ, kind: projection.SanctionBan}
	if typ == events.MemberMuted || typ == events.MemberUnmuted {
		sr.kind = projection.SanctionMute
	}
	return func(w http.ResponseWriter, r *http.Request) error {
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
		var req protocol.Sanction
		if typ == events.MemberBanned || typ == events.MemberMuted {
			if err := g.decodeBody(w, r, &req); err != nil {
				return err
			}
			if req.Until != nil {
				if !req.Until.After(time.Now()) {
					return apierr.BadRequest("until must be in the future")
				}
				// What PostgreSQL keeps, so that a retry finds it equal.
				u := req.Until.UTC().Truncate(time.Microsecond)
				req.Until = &u
			}
		}
		change, err := changeID(r, req.ChangeID)
		if err != nil {
			return err
		}
		e := events.New(typ, cid, user)
		e.UserID, e.Until = uid, req.Until
		if change != "" {
			e.EventID = uuid.NewSHA1(idempotencyNS, []byte(fmt.Sprintf("user\x00%d\x00%s\x00%s\x00%d\x00%d", user, typ, change, cid, uid))).String()
			out, done, err := g.members.SanctionOutcome(ctx, e, sr.kind)
			if err != nil {
				return err
			}
			if done && (out.Applied || out.Refused != "") {
				if out.Refused != "" {
					return sanctionRefusal(out.Refused, e)
				}
				replayed(w)
				writeAccepted(w)
				return nil
			}
		}
		rc, err := g.roles(ctx, cid, user, uid)
		if err != nil {
			return err
		}
		target := rc.target
		if target == "" {
			target = events.RoleMember // no member: banned in advance, or lifted after leaving
		}
		switch {
		case typ == events.MemberMuted && rc.target == "":
			return sanctionRefusal(projection.ReasonNoMember, e)
		case user == uid:
			return apierr.Forbidden("a member may not ban or mute itself")
		case !projection.MaySanction(rc.actor, target):
			return forbidden(rc.actor, "ban or mute a "+target, cid)
		}
		// The wait is woken by the user's entry of the system message:
		// one who is no member (banned in advance, or unbanned after
		// the ban removed it) gets none, the acting member does.
		watch := uid
		if rc.target == "" {
			watch = user
		}
		out, err := g.members.Sanction(ctx, e, sr.kind, watch)
		if err != nil {
			return err
		}
		if out.Refused != "" {
			return sanctionRefusal(out.Refused, e)
		}
		writeAccepted(w)
		return nil
	}
}

// sanctionRefusal is the client's error for a ban or mute the projection
// refused (or would).
func sanctionRefusal(reason string, e *events.Event) error {
	switch reason {
	case projection.ReasonNoConversation:
		return apierr.NotFound("conversation %d does not exist", e.ConversationID)
	case projection.ReasonNotMember:
		return apierr.NotMember("user %d is not a member of conversation %d", e.ActorID, e.ConversationID)
	case projection.ReasonNoMember:
		return apierr.NotFound("user %d is not a member of conversation %d", e.UserID, e.ConversationID)
	case projection.ReasonRole:
		return apierr.Forbidden("your role in conversation %d does not allow banning or muting user %d", e.ConversationID, e.UserID)
	}
	return apierr.BadRequest("the %s was refused by the projection (%s)", e.Type, reason)
}

// sqlBanned lists which of users $2 are banned from conversation $1 now.
const sqlBanned = `SELECT user_id FROM sanctions
WHERE conversation_id = $1 AND user_id = ANY($2::bigint[]) AND kind = 'ban' AND (until IS NULL OR until > now())
ORDER BY user_id LIMIT 1`

// refuseBanned answers 403 when one of ids is banned from cid, as the
// projection would refuse its member.added (projection.ReasonBanned).
func (g *Gateway) refuseBanned(ctx context.Context, cid int64, ids []int64) error {
	rows, err := g.srv.Conv(cid).Query(ctx, sqlBanned, cid, ids)
	if err != nil {
		return fmt.Errorf("bans of %d users in %d: %w", len(ids), cid, err)
	}
	defer rows.Close()
	if rows.Next() {
		var u int64
		if err := rows.Scan(&u); err != nil {
			return fmt.Errorf("bans in %d: %w", cid, err)
		}
		return apierr.Forbidden("user %d is banned from conversation %d", u, cid)
	}
	return rows.Err()
}
