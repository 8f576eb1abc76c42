package projector

import (
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

// The rules of a message's changes (edit, delete, reactions): each is
// judged at its log position against the message's state, bumps the
// message's version, and gives every member who can see the message one
// update entry per batch (a burst of reactions on one message becomes one
// entry per member, whatever its size; the entry is read with the
// message's state at read time).

type msgKey struct{ conv, seq int64 }

// msgState is the state of one message a batch changes or may change:
// loaded from the database, or made by a send of the batch (fresh).
type msgState struct {
	key       msgKey
	msgID     string
	found     bool // the message exists (loaded, or sent in this batch)
	fresh     bool // sent in this batch: inserted with its final state
	sender    int64
	kind      string
	at        time.Time
	deleted   bool
	version   int64
	edited    bool // body and editedAt changed in this batch
	body      string
	editedAt  time.Time
	replyTo   int64
	reactions map[string]int64 // emoji -> count
	// mine holds the reactions of the batch's actors: loaded ones, and
	// changes ("" = removed) to write.
	mine        map[int64]string
	mineChanged map[int64]bool
	cleared     bool  // deleted in this batch: its reaction rows go
	changed     bool  // version moved in this batch: an UPDATE (unless fresh)
	fanned      bool  // its update entries of this batch are added
	changedOrd  int64 // read mode: the conversation's change count at its last change
	// attachments are the message's files; attChanged says a thumbnail
	// was added in this batch (an UPDATE writes them).
	attachments []events.Attachment
	attChanged  bool
}

// change is a change_id the batch applied (or found applied), for the
// changes table and the waiting requests.
type change struct {
	changeID, eventID string
	conv, seq, actor  int64
	version           int64
}

// msgFor returns the state of message (conv, seq), made empty (not found)
// when the batch has not loaded it.
func (b *batch) msgFor(conv, seq int64) *msgState {
	k := msgKey{conv, seq}
	m := b.msgStates[k]
	if m == nil {
		m = &msgState{key: k, mine: map[int64]string{}, mineChanged: map[int64]bool{}}
		b.msgStates[k] = m
	}
	return m
}

// changeRefused judges the envelope of a change: a duplicate change_id is
// a no-op (answered from the changes table), and the actor must be a
// member who can see the message, which must exist and be a text message.
// It returns the message when the change may go on.
func (b *batch) changeRefused(r Record, c *convState) (*msgState, bool) {
	e := r.Event
	if b.knownChanges.has(e.ChangeID) {
		b.dups = append(b.dups, e.EventID)
		return nil, true
	}
	if !c.exists {
		b.reject(r, projection.ReasonNoConversation)
		return nil, true
	}
	joined, member := c.joined[e.ActorID]
	if !member {
		b.reject(r, projection.ReasonNotMember)
		return nil, true
	}
	// A muted member may still delete its messages and take back its
	// reactions: those only take away.
	if (e.Type == events.MessageEdited || e.Type == events.ReactionAdded) && b.muted(c, e) {
		b.reject(r, projection.ReasonMuted)
		return nil, true
	}
	// A frozen conversation takes no change from below admin, deleting
	// and taking back included: frozen is frozen (message.thumbnailed is
	// the gateway's, not a member's).
	if e.Type != events.MessageThumbnailed && b.frozenFor(c, e) {
		b.reject(r, projection.ReasonFrozen)
		return nil, true
	}
	m := b.msgFor(c.id, e.Seq)
	if !m.found || joined > e.Seq {
		b.reject(r, projection.ReasonNoMessage)
		return nil, true
	}
	if m.kind != "text" {
		b.reject(r, projection.ReasonSystemMessage)
		return nil, true
	}
	return m, false
}

func (b *batch) messageEdited(r Record, c *convState) {
	e := r.Event
	m, refused := b.changeRefused(r, c)
	switch {
	case refused:
		return
	case m.sender != e.ActorID:
		b.reject(r, projection.ReasonNotSender)
	case m.deleted:
		b.reject(r, projection.ReasonDeleted)
	case e.At.Sub(m.at) > projection.EditWindow:
		b.reject(r, projection.ReasonEditWindow)
	case e.SealedBody != "" && e.MsgID != m.msgID:
		b.reject(r, projection.ReasonNoMessage) // sealed for another message
	default:
		body, _, ok := b.body(r)
		switch {
		case !ok:
		case m.body == body:
			b.applied(e, m) // the same text again: nothing changes
		default:
			m.body, m.editedAt, m.edited = body, e.At, true
			b.changed(e, c, m)
		}
	}
}

// messageDeleted deletes by the sender, or by a moderator or above
// (roles.go); in a conversation without roles (created before them) also
// by its creator, as before roles. Deleting a deleted message changes
// nothing.
func (b *batch) messageDeleted(r Record, c *convState) {
	e := r.Event
	m, refused := b.changeRefused(r, c)
	switch {
	case refused:
		return
	case m.sender != e.ActorID && !projection.MayDeleteOthers(c.role(e.ActorID)) && (c.enforced || c.by != e.ActorID):
		b.reject(r, projection.ReasonNotSender)
	case m.deleted:
		b.applied(e, m)
	default:
		m.deleted, m.cleared, m.body, m.edited = true, true, "", true
		m.reactions = nil
		b.erase = append(b.erase, m.msgID) // its body key: the log's sealed copies can no longer be opened
		for u := range m.mine {
			m.mine[u] = ""
		}
		b.changed(e, c, m)
	}
}

// reactionAdded sets the actor's one reaction on the message (replacing
// another emoji of the actor's).
func (b *batch) reactionAdded(r Record, c *convState) {
	e := r.Event
	m, refused := b.changeRefused(r, c)
	switch {
	case refused:
		return
	case m.deleted:
		b.reject(r, projection.ReasonDeleted)
	case m.mine[e.ActorID] == e.Emoji:
		b.applied(e, m)
	case m.reactions[e.Emoji] == 0 && len(m.reactions) >= projection.MaxDistinctReactions &&
		!(m.mine[e.ActorID] != "" && m.reactions[m.mine[e.ActorID]] == 1):
		b.reject(r, projection.ReasonTooManyEmoji)
	default:
		m.react(e.ActorID, e.Emoji)
		b.changed(e, c, m)
	}
}

func (b *batch) reactionRemoved(r Record, c *convState) {
	e := r.Event
	m, refused := b.changeRefused(r, c)
	switch {
	case refused:
		return
	case m.mine[e.ActorID] == "":
		b.applied(e, m) // no reaction (or a deleted message): nothing to remove
	default:
		m.react(e.ActorID, "")
		b.changed(e, c, m)
	}
}

// body is the text of a send or an edit: its body, or its sealed body
// opened with the message's key. erased says the key is gone (the message
// was deleted since): the text is then empty. A sealed body that does not
// open is refused (ok false).
func (b *batch) body(r Record) (text string, erased, ok bool) {
	e := r.Event
	if e.Body != nil {
		return *e.Body, false, true
	}
	key, found := b.bodyKeys[e.MsgID]
	if !found {
		return "", true, true
	}
	text, err := events.Open(key, e.MsgID, e.SealedBody)
	if err != nil {
		b.reject(r, projection.ReasonUnsealable)
		return "", false, false
	}
	return text, false, true
}

// react sets user's reaction to emoji ("" removes it) and the counts.
func (m *msgState) react(user int64, emoji string) {
	if old := m.mine[user]; old != "" {
		if m.reactions[old]--; m.reactions[old] <= 0 {
			delete(m.reactions, old)
		}
	}
	if emoji != "" {
		if m.reactions == nil {
			m.reactions = map[string]int64{}
		}
		m.reactions[emoji]++
	}
	m.mine[user] = emoji
	m.mineChanged[user] = true
}

// applied records a change that changed nothing: its change_id is taken,
// at the message's current version.
func (b *batch) applied(e *events.Event, m *msgState) {
	b.knownChanges.add(e.ChangeID)
	b.changes = append(b.changes, change{changeID: e.ChangeID, eventID: e.EventID, conv: m.key.conv, seq: m.key.seq,
		actor: e.ActorID, version: m.version})
	b.changeAcks = append(b.changeAcks, ack{eventID: e.EventID, seq: m.key.seq})
}

// changed bumps the message's version, records the change and gives the
// members who can see the message their update entry (once per batch).
func (b *batch) changed(e *events.Event, c *convState, m *msgState) {
	m.version++
	m.changed = true
	b.applied(e, m)
	if c.read {
		c.changedRead(m) // every change counts, however the log is batched
	}
	if m.fanned {
		return
	}
	m.fanned = true
	if !m.fresh {
		b.changedMsgs = append(b.changedMsgs, m)
	}
	if c.read {
		return // read mode: no update entries; ?changed_after= reads it
	}
	for u, joined := range c.joined {
		if joined <= m.key.seq {
			b.fan = append(b.fan, fanRow{user: u, conv: c.id, kind: projection.KindUpdate, seq: m.key.seq, msg: m, at: e.At})
		}
	}
}

// row is the message's stored state: body, version, edited_at, deleted,
// reply_to, reactions (NULL when none).
func (m *msgState) row() (string, int64, *time.Time, bool, *int64, map[string]int64) {
	var edited *time.Time
	if !m.editedAt.IsZero() {
		t := m.editedAt
		edited = &t
	}
	var replyTo *int64
	if m.replyTo > 0 {
		r := m.replyTo
		replyTo = &r
	}
	var reactions map[string]int64
	if len(m.reactions) > 0 {
		reactions = m.reactions
	}
	return m.body, m.version, edited, m.deleted, replyTo, reactions
}

const (
	sqlUpdateMessages = `UPDATE messages m SET body = u.b, version = u.v, edited_at = coalesce(u.e, m.edited_at),
  deleted = u.d, reactions = u.r, changed_ord = greatest(m.changed_ord, u.co),
  attachments = CASE WHEN u.d THEN NULL WHEN u.att IS NOT NULL THEN u.att ELSE m.attachments END
FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::timestamptz[], $6::bool[], $7::jsonb[], $8::bigint[],
  $9::jsonb[])
  AS u(c, s, b, v, e, d, r, co, att)
WHERE m.conversation_id = u.c AND m.seq = u.s`
	sqlClearReactions = `DELETE FROM reactions r USING unnest($1::bigint[], $2::bigint[]) AS u(c, s)
WHERE r.conversation_id = u.c AND r.seq = u.s`
	sqlDeleteReactions = `DELETE FROM reactions r USING unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS u(c, s, usr)
WHERE r.conversation_id = u.c AND r.seq = u.s AND r.user_id = u.usr`
	sqlUpsertReactions = `INSERT INTO reactions (conversation_id, seq, user_id, emoji)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[])
ON CONFLICT (conversation_id, seq, user_id) DO UPDATE SET emoji = excluded.emoji`
	sqlInsertChanges = `INSERT INTO changes (change_id, event_id, conversation_id, seq, actor_id, version)
SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[])
ON CONFLICT DO NOTHING`
)

// queueChanges queues the writes of the batch's changes of messages: the
// changed rows of messages sent before the batch (those sent in it are
// inserted with their final state), the reactions, and the change ids.
func (b *batch) queueChanges(bt *pgx.Batch) {
	if len(b.changes) == 0 {
		return
	}
	var cs, ss, vs, cos []int64
	var bodies []string
	var edits []*time.Time
	var dels []bool
	var reacts []map[string]int64
	var atts []*string
	for _, m := range b.changedMsgs {
		body, v, edited, deleted, _, reactions := m.row()
		cs, ss, vs, cos = append(cs, m.key.conv), append(ss, m.key.seq), append(vs, v), append(cos, m.changedOrd)
		bodies, edits, dels, reacts = append(bodies, body), append(edits, edited), append(dels, deleted), append(reacts, reactions)
		var att *string
		if m.attChanged && !m.deleted {
			att, _ = attachmentsJSON(m)
		}
		atts = append(atts, att)
	}
	if len(cs) > 0 {
		bt.Queue(sqlUpdateMessages, cs, ss, bodies, vs, edits, dels, reacts, cos, atts)
	}
	var clearC, clearS, delC, delS, delU, upC, upS, upU []int64
	var upE []string
	keys := make([]msgKey, 0, len(b.msgStates))
	for k := range b.msgStates {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].conv < keys[j].conv || keys[i].conv == keys[j].conv && keys[i].seq < keys[j].seq
	})
	for _, k := range keys {
		m := b.msgStates[k]
		if m.cleared {
			clearC, clearS = append(clearC, k.conv), append(clearS, k.seq)
			continue
		}
		users := make([]int64, 0, len(m.mineChanged))
		for u := range m.mineChanged {
			users = append(users, u)
		}
		sort.Slice(users, func(i, j int) bool { return users[i] < users[j] })
		for _, u := range users {
			if e := m.mine[u]; e == "" {
				delC, delS, delU = append(delC, k.conv), append(delS, k.seq), append(delU, u)
			} else {
				upC, upS, upU, upE = append(upC, k.conv), append(upS, k.seq), append(upU, u), append(upE, e)
			}
		}
	}
	if len(clearC) > 0 {
		bt.Queue(sqlClearReactions, clearC, clearS)
	}
	if len(delC) > 0 {
		bt.Queue(sqlDeleteReactions, delC, delS, delU)
	}
	if len(upC) > 0 {
		bt.Queue(sqlUpsertReactions, upC, upS, upU, upE)
	}
	if len(b.erase) > 0 {
		// The keys of deleted messages: what the log holds of their bodies
		// can no longer be opened, by anyone, by a replay either.
		bt.Queue(`DELETE FROM public.body_keys WHERE msg_id = ANY($1::uuid[])`, b.erase)
	}
	n := len(b.changes)
	ids, evs := make([]string, n), make([]string, n)
	ccs, css, cas, cvs := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, c := range b.changes {
		ids[i], evs[i], ccs[i], css[i], cas[i], cvs[i] = c.changeID, c.eventID, c.conv, c.seq, c.actor, c.version
	}
	bt.Queue(sqlInsertChanges, ids, evs, ccs, css, cas, cvs)
}

// changedInOrder returns the messages whose version moved in the batch, by
// conversation and seq.
func (b *batch) changedInOrder() []*msgState {
	var out []*msgState
	for _, m := range b.msgStates {
		if m.changed {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ki, kj := out[i].key, out[j].key
		return ki.conv < kj.conv || ki.conv == kj.conv && ki.seq < kj.seq
	})
	return out
}
