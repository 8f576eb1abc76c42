package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

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
			if err := g.sanctionBody(w, r, &req); err != nil {
				return err
			}
		}
		change, err := changeID(r, req.ChangeID)
		if err != nil {
			return err
		}
		e := events.New(typ, cid, user)
		e.UserID, e.Until = uid, req.Until
		if change != "" {
			e.EventID = userChangeID(user, typ, change, cid, uid)
			out, done, err := g.members.SanctionOutcome(ctx, e, sr.kind)
			if err != nil {
				return err
			}
			if ok, err := answerSettled(w, out, done, func(reason string) error { return sanctionRefusal(reason, e) }); ok {
				return err
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
		return answerOutcome(w, out, func(reason string) error { return sanctionRefusal(reason, e) })
	}
}

// sanctionRefusal is the client's error for a ban or mute the projection
// refused (or would).
func sanctionRefusal(reason string, e *events.Event) error {
	return conversationRefusal(reason, e, fmt.Sprintf("banning or muting user %d", e.UserID), e.Type)
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

// sqlAnyMember reads one current member of conversation $1.
const sqlAnyMember = `SELECT user_id FROM member_spans WHERE conversation_id = $1 AND left_seq IS NULL LIMIT 1`

// sqlSanctions lists the standing sanctions of kind $2 in conversation $1
// after user $3, by user id: the table's primary key.
const sqlSanctions = `SELECT user_id, until, set_by, set_at FROM sanctions
WHERE conversation_id = $1 AND kind = $2 AND user_id > $3 AND (until IS NULL OR until > now())
ORDER BY user_id LIMIT $4`

// handleSanctions is GET /v1/conversations/{cid}/bans or .../mutes: the
// bans or mutes that stand, for a moderator or above (those who may set
// them); 403 forbidden for the other members, 403 not_member for others.
func (g *Gateway) handleSanctions(kind string) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		pg, err := g.memberPage(r)
		if err != nil {
			return err
		}
		ctx := r.Context()
		rc, err := g.roles(ctx, pg.cid, userFrom(ctx), 0)
		if err != nil {
			return err
		}
		if projection.Rank(rc.actor) < projection.Rank(events.RoleModerator) {
			return forbidden(rc.actor, "list its "+kind+"s", pg.cid)
		}
		return g.writeSanctions(w, r, pg, kind)
	}
}

// handleServerSanctions is GET /v1/server/conversations/{cid}/bans or
// .../mutes (scope read): the list of handleSanctions, for a service.
func (g *Gateway) handleServerSanctions(kind string) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		pg, err := g.pageOf(r)
		if err != nil {
			return err
		}
		if err := g.requireConversation(r.Context(), pg.cid); err != nil {
			return err
		}
		return g.writeSanctions(w, r, pg, kind)
	}
}

// writeSanctions answers one page of the sanctions of kind.
func (g *Gateway) writeSanctions(w http.ResponseWriter, r *http.Request, pg *memberPage, kind string) error {
	out := protocol.SanctionList{ConversationID: pg.cid, Sanctions: []protocol.SanctionEntry{}}
	err := pg.read(r.Context(), g.srv.Conv(pg.cid), sqlSanctions, []any{pg.cid, kind, pg.after, pg.limit + 1}, func(rs pgx.Rows) (int64, error) {
		var s protocol.SanctionEntry
		err := rs.Scan(&s.UserID, &s.Until, &s.By, &s.At)
		out.Sanctions = append(out.Sanctions, s)
		return s.UserID, err
	})
	if err != nil {
		return err
	}
	out.Sanctions, out.NextPage = cut(pg, out.Sanctions)
	apierr.WriteJSON(w, http.StatusOK, out)
	return nil
}

// handleServerSanction is PUT (set) or DELETE (lift) of
// /v1/server/conversations/{cid}/bans/{uid} and .../mutes/{uid} (scope
// members): the service, as itself, bans or mutes anyone. Its event id
// derives from the Idempotency-Key.
func (g *Gateway) handleServerSanction(typ string) func(w http.ResponseWriter, r *http.Request) error {
	kind := projection.SanctionBan
	if typ == events.MemberMuted || typ == events.MemberUnmuted {
		kind = projection.SanctionMute
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		ctx := r.Context()
		k, idem, cid, err := serverWrite(r)
		if err != nil {
			return err
		}
		uid, err := pathID(r, "uid")
		if err != nil {
			return err
		}
		var req protocol.Sanction
		if typ == events.MemberBanned || typ == events.MemberMuted {
			if err := g.sanctionBody(w, r, &req); err != nil {
				return err
			}
		}
		if req.ChangeID != "" {
			return apierr.BadRequest("the server API takes the Idempotency-Key, not change_id")
		}
		e := events.New(typ, cid, 0)
		e.EventID, e.Service, e.UserID, e.Until = derivedID(k, typ, idem, cid, uid), k.Actor(), uid, req.Until
		rc, err := g.roles(ctx, cid, 0, uid)
		if err != nil {
			return err
		}
		if typ == events.MemberMuted && rc.target == "" {
			return sanctionRefusal(projection.ReasonNoMember, e)
		}
		// As for a member's: a user who is no member gets no entry to
		// wake the wait; any member gets the system message.
		watch := uid
		if rc.target == "" {
			if err := g.srv.Conv(cid).QueryRow(ctx, sqlAnyMember, cid).Scan(&watch); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("a member of %d: %w", cid, err)
			}
		}
		out, err := g.members.Sanction(ctx, e, kind, watch)
		if err != nil {
			return err
		}
		return answerOutcome(w, out, func(reason string) error { return sanctionRefusal(reason, e) })
	}
}

// sanctionBody decodes the body of a ban or mute: an until must be in
// the future, and is kept as PostgreSQL keeps it, so that a retry finds it
// equal.
func (g *Gateway) sanctionBody(w http.ResponseWriter, r *http.Request, req *protocol.Sanction) error {
	if err := g.decodeBody(w, r, req); err != nil {
		return err
	}
	if req.Until != nil {
		if !req.Until.After(time.Now()) {
			return apierr.BadRequest("until must be in the future")
		}
		u := req.Until.UTC().Truncate(time.Microsecond)
		req.Until = &u
	}
	return nil
}
