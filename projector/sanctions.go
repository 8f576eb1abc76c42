package projector

import (
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

// Bans and mutes (docs/protocol.md, "Ban and mute"): the rules are
// projection's (projection/sanctions.go), shared with the gateway; here
// they are applied at the log position, and a ban or mute is judged
// standing or lapsed by the time of the event that meets it, so that a
// replay judges as the live projection did. A batch loads the sanctions
// of the (conversation, user) pairs its events touch, whether or not its
// conversations come from the cache, and writes back those it changed.

// sanctionKey names a ban or mute: kind is projection.SanctionBan or
// projection.SanctionMute.
type sanctionKey struct {
	conv, user int64
	kind       string
}

// sanction is a stored ban or mute: until nil stands until lifted.
type sanction struct {
	until *time.Time
	by    int64
	at    time.Time
}

const (
	// sqlSanctions reads the sanctions of the (conversation, user)
	// pairs $1, $2: a point lookup on the primary key each.
	sqlSanctions = `SELECT s.conversation_id, s.user_id, s.kind, s.until, s.set_by, s.set_at
FROM unnest($1::bigint[], $2::bigint[]) AS k(c, u) JOIN sanctions s ON s.conversation_id = k.c AND s.user_id = k.u`
	sqlUpsertSanctions = `INSERT INTO sanctions (conversation_id, user_id, kind, until, set_by, set_at)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::timestamptz[], $5::bigint[], $6::timestamptz[])
ON CONFLICT (conversation_id, user_id, kind) DO UPDATE SET until = excluded.until, set_by = excluded.set_by, set_at = excluded.set_at`
	sqlDeleteSanctions = `DELETE FROM sanctions s USING unnest($1::bigint[], $2::bigint[], $3::text[]) AS k(c, u, kind)
WHERE s.conversation_id = k.c AND s.user_id = k.u AND s.kind = k.kind`
)

// sanctionPair says which (conversation, user) pair, if any, the judgement
// of e depends on for bans and mutes.
func sanctionPair(e *events.Event) (recKey, bool) {
	switch e.Type {
	case events.MemberAdded, events.MemberBanned, events.MemberUnbanned, events.MemberMuted, events.MemberUnmuted:
		return recKey{e.UserID, e.ConversationID}, true
	case events.MessageSent, events.MessageEdited, events.ReactionAdded:
		return recKey{e.ActorID, e.ConversationID}, e.ActorID != 0
	}
	return recKey{}, false
}

// queueLoadSanctions queues the read of the sanctions of pairs.
func queueLoadSanctions(bt *pgx.Batch, b *batch, convs, users []int64) {
	bt.Queue(sqlSanctions, convs, users).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var k sanctionKey
			s := &sanction{}
			if err := rows.Scan(&k.conv, &k.user, &k.kind, &s.until, &s.by, &s.at); err != nil {
				return err
			}
			b.sanctions[k] = s
		}
		return rows.Err()
	})
}

// standing says whether u's sanction kind in c stands at time at.
func (b *batch) standing(c, u int64, kind string, at time.Time) bool {
	s := b.sanctions[sanctionKey{c, u, kind}]
	return s != nil && projection.Standing(s.until, at)
}

// muted says whether the actor of e is muted in c when e happens.
func (b *batch) muted(c *convState, e *events.Event) bool {
	return e.ActorID != 0 && b.standing(c.id, e.ActorID, projection.SanctionMute, e.At)
}

// setSanction sets (s non-nil) or lifts the sanction k.
func (b *batch) setSanction(k sanctionKey, s *sanction) {
	if s == nil {
		delete(b.sanctions, k)
	} else {
		b.sanctions[k] = s
	}
	b.sanctionsChanged[k] = true
}

// sanctionRefused judges the actor of a ban, unban, mute or unmute: a
// member of a higher role than its target, moderator or above; a service
// acting as itself sanctions anyone.
func (b *batch) sanctionRefused(r Record, c *convState) bool {
	e := r.Event
	if b.membershipRefused(r, c) {
		return true
	}
	if e.ActorID != 0 && (e.ActorID == e.UserID || !projection.MaySanction(c.role(e.ActorID), c.role(e.UserID))) {
		b.reject(r, projection.ReasonRole)
		return true
	}
	return false
}

// sameUntil says whether a and b lapse at the same time.
func sameUntil(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// sanctionBody is the system message of a sanction event.
func sanctionBody(e *events.Event) string {
	body := map[string]any{"event": e.Type, "user_id": e.UserID, "by": e.ActorID}
	if e.Until != nil {
		body["until"] = e.Until.UTC()
	}
	return systemBody(body)
}

// memberBanned bans a user, a member or not: a member is removed, as by
// member.removed, and the ban is recorded. Banning a user already banned
// until the same time changes nothing.
func (b *batch) memberBanned(r Record, c *convState) {
	e := r.Event
	if b.sanctionRefused(r, c) {
		return
	}
	k := sanctionKey{c.id, e.UserID, projection.SanctionBan}
	if s := b.sanctions[k]; s != nil && sameUntil(s.until, e.Until) && !c.members[e.UserID] {
		return
	}
	b.setSanction(k, &sanction{until: e.Until, by: e.ActorID, at: e.At})
	if c.members[e.UserID] {
		b.removeMember(c, e, sanctionBody(e))
		return
	}
	b.message(c, e.EventID, e.ActorID, "system", sanctionBody(e), e.At)
}

// memberMuted mutes a member. Muting one muted until the same time
// changes nothing.
func (b *batch) memberMuted(r Record, c *convState) {
	e := r.Event
	if b.sanctionRefused(r, c) {
		return
	}
	if !c.members[e.UserID] {
		b.reject(r, projection.ReasonNoMember)
		return
	}
	k := sanctionKey{c.id, e.UserID, projection.SanctionMute}
	if s := b.sanctions[k]; s != nil && sameUntil(s.until, e.Until) {
		return
	}
	b.setSanction(k, &sanction{until: e.Until, by: e.ActorID, at: e.At})
	seq := b.message(c, e.EventID, e.ActorID, "system", sanctionBody(e), e.At)
	b.fanTo(c, e.UserID, seq, e.At) // in read mode the muted member still learns of it
}

// memberLifted lifts a ban (member.unbanned) or a mute (member.unmuted),
// standing or lapsed; lifting none changes nothing.
func (b *batch) memberLifted(r Record, c *convState, kind string) {
	e := r.Event
	if b.sanctionRefused(r, c) {
		return
	}
	k := sanctionKey{c.id, e.UserID, kind}
	if b.sanctions[k] == nil {
		return
	}
	b.setSanction(k, nil)
	seq := b.message(c, e.EventID, e.ActorID, "system", sanctionBody(e), e.At)
	if c.members[e.UserID] {
		b.fanTo(c, e.UserID, seq, e.At)
	}
}

// queueSanctions queues the writes of the sanctions the batch changed.
func (t *txn) queueSanctions(bt *pgx.Batch) {
	var dc, du []int64
	var dk []string
	var uc, uu, uby []int64
	var uk []string
	var until []*time.Time
	var uat []time.Time
	for k := range t.b.sanctionsChanged {
		s := t.b.sanctions[k]
		if s == nil {
			dc, du, dk = append(dc, k.conv), append(du, k.user), append(dk, k.kind)
			continue
		}
		uc, uu, uk = append(uc, k.conv), append(uu, k.user), append(uk, k.kind)
		until, uby, uat = append(until, s.until), append(uby, s.by), append(uat, s.at)
	}
	if len(dc) > 0 {
		bt.Queue(sqlDeleteSanctions, dc, du, dk)
	}
	if len(uc) > 0 {
		bt.Queue(sqlUpsertSanctions, uc, uu, uk, until, uby, uat)
	}
}
