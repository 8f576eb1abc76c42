package projector

import (
	"encoding/json"
	"time"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

// The projection rules: what each event does to the in-memory state of a
// batch, and the rows it adds. Nothing here touches the database; load.go
// fills the state a batch starts from and write.go writes the rows.

type convState struct {
	id       int64
	exists   bool
	created  bool // created in this batch
	title    string
	by       int64
	at       time.Time
	lastSeq  int64
	lastAt   time.Time
	texts    int64 // text messages up to lastSeq: the ord of the last message
	changed  bool
	members  map[int64]bool
	joined   map[int64]int64 // current member -> the seq its span began
	loadedAt int64           // last_seq as loaded

	// Read fan-out (large.go): the mode now, a channel never switches
	// down; members holds only the users the batch names when partial.
	read, channel bool
	partial       bool
	memberCount   int64
	changeCount   int64
	armed         map[int64]bool // armed members (read mode)

	// Roles (roles.go): whether they limit adding and removing members
	// (conversation.created's roles), the owner (0: none) and the roles
	// other than member of the loaded members.
	enforced bool
	owner    int64
	roles    map[int64]string

	// Settings (settings.go): title is loaded too, so that a batch
	// writes the row whole and judges a rename that changes nothing.
	frozen   bool
	slowMode int
}

type recKey struct{ user, conv int64 }

type recState struct {
	pinned, muted, removed bool
	readSeq                int64
	version                int64 // assigned when users are locked
	dirty                  bool
}

type span struct {
	conv, user, joined, left int64 // left 0 = open
	role                     string
}

type fanRow struct {
	user, conv int64
	kind       int16
	seq        int64
	inbox      int64     // the inbox_seq write numbers it with
	version    int64     // the record version (kind record)
	rec        *recState // kind record
	msg        *msgState // kind update: the version is the message's
	at         time.Time
}

type msgRow struct {
	conv, seq int64
	msgID     string
	sender    int64
	kind      string
	body      string
	at        time.Time
	st        *msgState // its state at the end of the batch
	// senderName is a service's system or bot sender (sender 0), "" else.
	senderName string
	// ord counts the conversation's text messages up to this one
	// (migrations/00006_counts.sql). mentions are the users it mentions as
	// sent (the message's column, what its sender saw answered);
	// mentioned those of them that count: members at this position, not
	// the sender (the mentions table).
	ord        int64
	mentions   []int64
	mentioned  []int64
	mentionAll bool
	imported   bool // appended by an import: no inbox entries (docs/import.md)
}

type rejection struct {
	eventID, msgID, typ string
	conv, actor         int64
	reason              string
	partition           int32
	offset              int64
}

// idSet is a set of uuids in their text form.
type idSet map[string]struct{}

func (s idSet) has(id string) bool {
	_, ok := s[id]
	return ok
}

func (s idSet) add(id string) { s[id] = struct{}{} }

type batch struct {
	convs   map[int64]*convState
	records map[recKey]*recState
	// known holds the msg ids already projected or seen in this batch; a
	// system message's msg id is its event's id, so known also answers
	// "was this membership event applied".
	known idSet
	// refused holds the event ids rejected in this batch.
	refused   idSet
	msgs      []msgRow
	fan       []fanRow
	newSpans  []*span
	openNew   map[recKey]*span // spans opened in this batch and still open
	closes    []span           // closes of spans opened before this batch
	rejects   []rejection
	recsOrder []recKey
	// spanRoles are the roles set on spans open before the batch (a
	// span the batch opens carries its own, span.role).
	spanRoles map[recKey]string
	acks      []ack    // message.sent events projected, for the senders' gateways
	dups      []string // event ids of message.sent events whose msg_id was taken, and of repeated changes

	// Bans and mutes (sanctions.go): those loaded and set, and the keys
	// the batch changed (a changed key without a sanction is lifted).
	sanctions        map[sanctionKey]*sanction
	sanctionsChanged map[sanctionKey]bool

	// Blocks between users (blocks.go): each pair's state after the
	// batch's user-level events.
	blocks map[blockKey]*blockState

	// The changes of messages (changes.go).
	msgStates    map[msgKey]*msgState
	knownChanges idSet
	changes      []change
	changeAcks   []ack
	changedMsgs  []*msgState // loaded messages whose row is updated
	// bodyKeys are the keys of the batch's sealed bodies by msg_id (none:
	// erased); erase are the msg_ids whose keys go (deleted messages).
	bodyKeys map[string][]byte
	erase    []string

	// Reports (reports.go): those the batch names by id, the reporters'
	// spans as loaded, and the reports to insert and to resolve.
	reports         map[string]*reportState
	reportSpans     map[recKey][]reportSpan
	newReports      []*reportState
	resolvedReports []*reportState
	// claims are the live uploads the batch's sends with attachments
	// claimed, by msg_id; attach the uploads their messages keep
	// (attachments.go).
	claims map[string]map[string]bool
	attach []string

	// reads moves the read positions of senders past their own messages,
	// without a record version or entry (the message entry says it).
	reads map[recKey]int64
	// receipts are the read positions moved by read events, notified to the
	// other members' gateways.
	receipts []projection.Read

	// Read fan-out (large.go): the member threshold, the mode switches, the
	// joins and removals of read-mode conversations, the armed flags to
	// write, and who got the last message in read mode.
	threshold int64
	modes     []modeRow
	members   []projection.Membership
	armedNow  map[recKey]bool
	lastGot   map[int64]bool

	// Imported history (docs/import.md): importing is set while an
	// imported event is applied; importedRead is, per conversation, the
	// last imported message seq, every current member's read position is
	// moved to.
	importing    bool
	importedRead map[int64]int64
}

// ack is a message.sent event and the seq its message got.
type ack struct {
	eventID    string
	seq        int64
	user, conv int64 // the sender and conversation (message.sent)
}

func newBatch(threshold int64) *batch {
	if threshold <= 0 {
		threshold = DefaultLargeThreshold
	}
	return &batch{
		threshold: threshold,
		armedNow:  map[recKey]bool{},
		convs:     map[int64]*convState{},
		records:   map[recKey]*recState{},
		known:     idSet{},
		refused:   idSet{},
		openNew:   map[recKey]*span{},
		spanRoles: map[recKey]string{},

		sanctions:        map[sanctionKey]*sanction{},
		sanctionsChanged: map[sanctionKey]bool{},
		blocks:           map[blockKey]*blockState{},

		msgStates:    map[msgKey]*msgState{},
		bodyKeys:     map[string][]byte{},
		reads:        map[recKey]int64{},
		knownChanges: idSet{},
		importedRead: map[int64]int64{},
		reports:      map[string]*reportState{},
		reportSpans:  map[recKey][]reportSpan{},
	}
}

// apply applies one record that is not yet applied: an undecodable one
// only moves the offset, a dead-lettered one is a rejection.
func (b *batch) apply(r Record) {
	switch {
	case r.Event == nil:
	case r.DeadLetter:
		b.reject(r, projection.ReasonDeadLetter)
	case events.UserLevel(r.Event.Type):
		b.userBlock(r.Event) // no conversation: nothing of step applies
	default:
		b.step(r)
	}
}

// reject refuses r's event for reason: a rejection row, no seq.
func (b *batch) reject(r Record, reason string) {
	e := r.Event
	if b.refused.has(e.EventID) {
		return // a duplicate record of an event already refused
	}
	b.refused.add(e.EventID)
	msgID := e.MsgID
	if msgID == "" {
		msgID = e.ChangeID // a change is waited for by its change_id
	}
	if msgID == "" {
		msgID = e.ReportID // a report by its report id
	}
	b.rejects = append(b.rejects, rejection{eventID: e.EventID, msgID: msgID, typ: e.Type,
		conv: e.ConversationID, actor: e.ActorID, reason: reason, partition: r.Partition, offset: r.Offset})
}

// step applies one event to the in-memory state of the batch. Its
// conversation is in b.convs (loaded, or known not to exist).
func (b *batch) step(r Record) {
	c := b.convs[r.Event.ConversationID]
	if r.Event.Imported() {
		defer b.imported(r.Event, len(b.fan))
		b.importing = true
	}
	switch r.Event.Type {
	case events.ConversationCreated:
		b.conversationCreated(r, c)
	case events.MemberAdded:
		b.memberAdded(r, c)
	case events.MemberRemoved:
		b.memberRemoved(r, c)
	case events.MemberRoleSet:
		b.memberRoleSet(r, c)
	case events.MemberBanned:
		b.memberBanned(r, c)
	case events.MemberUnbanned:
		b.memberLifted(r, c, projection.SanctionBan)
	case events.MemberMuted:
		b.memberMuted(r, c)
	case events.MemberUnmuted:
		b.memberLifted(r, c, projection.SanctionMute)
	case events.ConversationUpdated:
		b.conversationUpdated(r, c)
	case events.MessageSent:
		b.messageSent(r, c)
	case events.RecordUpdated:
		b.recordUpdated(r.Event, c)
	case events.ReadUpdated:
		b.readUpdated(r.Event, c)
	case events.MessageEdited:
		b.messageEdited(r, c)
	case events.MessageDeleted:
		b.messageDeleted(r, c)
	case events.ReactionAdded:
		b.reactionAdded(r, c)
	case events.ReactionRemoved:
		b.reactionRemoved(r, c)
	case events.MessageThumbnailed:
		b.messageThumbnailed(r, c)
	case events.MessageReported:
		b.messageReported(r, c)
	case events.ReportResolved:
		b.reportResolved(r, c)
	}
}

func (b *batch) conversationCreated(r Record, c *convState) {
	e := r.Event
	if b.known.has(e.EventID) {
		return // duplicate record of the same event
	}
	if c.exists {
		b.reject(r, projection.ReasonExists)
		return
	}
	// A service creating a conversation for users (actor 0) is no member.
	members := []int64{}
	seen := map[int64]bool{}
	if e.ActorID > 0 {
		members, seen[e.ActorID] = append(members, e.ActorID), true
	}
	for _, m := range e.Members {
		if !seen[m] {
			seen[m] = true
			members = append(members, m)
		}
	}
	c.exists, c.created, c.title, c.by, c.at = true, true, e.Title, e.ActorID, e.At
	c.enforced = e.Roles
	for _, m := range members {
		c.members[m] = true
	}
	b.created(c, e.Channel)
	seq := b.message(c, e.EventID, e.ActorID, "system", systemBody(map[string]any{
		"event": events.ConversationCreated, "by": e.ActorID, "title": e.Title, "members": members}), e.At)
	for _, m := range members {
		b.openSpan(c.id, m, seq)
		b.record(m, c.id, e.At, func(rs *recState) { rs.removed, rs.readSeq = false, max(rs.readSeq, seq) })
	}
	if e.ActorID > 0 {
		// The creator owns what it creates; a service does not.
		b.setRole(c, e.ActorID, events.RoleOwner)
	}
}

// membershipRefused says whether a member event is a duplicate or
// refused (and rejects it then): the conversation must exist and the actor
// be a member, unless the actor is a service acting as itself (actor 0).
func (b *batch) membershipRefused(r Record, c *convState) bool {
	e := r.Event
	if b.known.has(e.EventID) {
		return true
	}
	if !c.exists {
		b.reject(r, projection.ReasonNoConversation)
		return true
	}
	if e.ActorID != 0 && !c.members[e.ActorID] {
		b.reject(r, projection.ReasonNotMember)
		return true
	}
	return false
}

func (b *batch) memberAdded(r Record, c *convState) {
	e := r.Event
	if b.membershipRefused(r, c) {
		return
	}
	if c.members[e.UserID] {
		return // already a member: nothing changes
	}
	if e.ActorID != 0 && !projection.MayAdd(c.role(e.ActorID), c.enforced) {
		b.reject(r, projection.ReasonRole)
		return
	}
	if b.frozenFor(c, e) {
		b.reject(r, projection.ReasonFrozen)
		return
	}
	// A ban holds against everyone's adds, a service's too: it lifts
	// the ban first.
	if b.standing(c.id, e.UserID, projection.SanctionBan, e.At) {
		b.reject(r, projection.ReasonBanned)
		return
	}
	c.members[e.UserID] = true
	seq := b.message(c, e.EventID, e.ActorID, "system", systemBody(map[string]any{
		"event": events.MemberAdded, "user_id": e.UserID, "by": e.ActorID}), e.At)
	if b.importing {
		// An imported join is an entry of its joiner only.
		b.fan = append(b.fan, fanRow{user: e.UserID, conv: c.id, kind: projection.KindMessage, seq: seq, at: e.At})
	} else {
		b.fanTo(c, e.UserID, seq, e.At) // in read mode the joiner still gets its join
	}
	b.openSpan(c.id, e.UserID, seq)
	b.joinedLarge(c, e.UserID, seq)
	// A member's read position starts at its join: what was sent before
	// it is not unread.
	b.record(e.UserID, c.id, e.At, func(rs *recState) { rs.removed, rs.readSeq = false, max(rs.readSeq, seq) })
}

func (b *batch) memberRemoved(r Record, c *convState) {
	e := r.Event
	if b.membershipRefused(r, c) {
		return
	}
	if !c.members[e.UserID] {
		return // not a member: nothing changes
	}
	if e.ActorID != 0 && e.ActorID != e.UserID && !projection.MayRemove(c.role(e.ActorID), c.role(e.UserID), c.enforced) {
		b.reject(r, projection.ReasonRole)
		return
	}
	b.removeMember(c, e, systemBody(map[string]any{"event": events.MemberRemoved, "user_id": e.UserID, "by": e.ActorID}))
}

// removeMember removes e.UserID from c by e (a member.removed or a
// member.banned), with the system message body.
func (b *batch) removeMember(c *convState, e *events.Event, body string) {
	// The removed member receives its own removal, then leaves. A removal
	// that takes a read-mode conversation down is already in write mode:
	// every member gets it, and learns of the switch from it.
	b.switchingDown(c)
	seq := b.message(c, e.EventID, e.ActorID, "system", body, e.At)
	b.fanTo(c, e.UserID, seq, e.At) // in read mode the removed member still gets its removal
	delete(c.members, e.UserID)
	if c.armed[e.UserID] {
		delete(c.armed, e.UserID)
		b.armedNow[recKey{e.UserID, c.id}] = false
	}
	b.closeSpan(c.id, e.UserID, seq)
	b.leftRole(c, e.UserID)
	b.leftLarge(c, e.UserID)
	b.record(e.UserID, c.id, e.At, func(rs *recState) { rs.removed = true })
}

func (b *batch) messageSent(r Record, c *convState) {
	e := r.Event
	if b.known.has(e.MsgID) {
		b.dups = append(b.dups, e.EventID)
		return // I5: a msg_id is projected at most once
	}
	if !c.exists {
		b.reject(r, projection.ReasonNoConversation)
		return
	}
	// A service's own message (actor 0, a named system sender) needs no
	// membership, and sees every message to reply to.
	if e.ActorID != 0 && !c.members[e.ActorID] {
		b.reject(r, projection.ReasonNotMember)
		return
	}
	if b.muted(c, e) {
		b.reject(r, projection.ReasonMuted)
		return
	}
	if b.frozenFor(c, e) {
		b.reject(r, projection.ReasonFrozen)
		return
	}
	if e.ReplyTo > c.lastSeq || e.ReplyTo > 0 && e.ReplyTo < c.joined[e.ActorID] {
		b.reject(r, projection.ReasonNoMessage) // a reply to a message the sender cannot see
		return
	}
	body, erased, ok := b.body(r)
	if !ok {
		return
	}
	atts, ok := b.attachments(r, erased)
	if !ok {
		return
	}
	seq := b.message(c, e.MsgID, e.ActorID, "text", body, e.At)
	b.msgs[len(b.msgs)-1].senderName = e.SenderName
	b.msgStates[msgKey{c.id, seq}].attachments = atts
	if b.importing {
		b.importedRead[c.id] = seq // history is read: no entry, no mention
	} else {
		b.mention(c, e)
	}
	if e.ActorID != 0 {
		b.readOwn(e.ActorID, c.id, seq)
	}
	st := b.msgStates[msgKey{c.id, seq}]
	st.replyTo = e.ReplyTo
	st.deleted = erased // its key is gone: deleted after this send, before this projection (a replay)
	b.acks = append(b.acks, ack{eventID: e.EventID, seq: seq, user: e.ActorID, conv: c.id})
}

// recordUpdated changes pin and mute; a change to what they already are is
// no change (no version, no entry).
func (b *batch) recordUpdated(e *events.Event, c *convState) {
	if !c.exists || !c.members[e.ActorID] {
		return
	}
	rs := b.current(e.ActorID, c.id)
	if (e.Pinned == nil || *e.Pinned == rs.pinned) && (e.Muted == nil || *e.Muted == rs.muted) {
		return
	}
	b.record(e.ActorID, c.id, e.At, func(rs *recState) {
		if e.Pinned != nil {
			rs.pinned = *e.Pinned
		}
		if e.Muted != nil {
			rs.muted = *e.Muted
		}
	})
}

// readUpdated moves the read position forward, never past the last seq.
func (b *batch) readUpdated(e *events.Event, c *convState) {
	if !c.exists || !c.members[e.ActorID] {
		return
	}
	read := min(*e.ReadSeq, c.lastSeq)
	if read <= b.current(e.ActorID, c.id).readSeq {
		return
	}
	b.record(e.ActorID, c.id, e.At, func(rs *recState) { rs.readSeq = read })
	b.receipts = append(b.receipts, projection.Read{Conv: c.id, User: e.ActorID, Seq: read})
	if c.read && read >= c.lastSeq {
		b.arm(c, e.ActorID)
	}
}

func systemBody(fields map[string]any) string {
	raw, _ := json.Marshal(fields)
	return string(raw)
}

// message appends a message to c and fans it out to the current members.
func (b *batch) message(c *convState, msgID string, sender int64, kind, body string, at time.Time) int64 {
	b.known.add(msgID)
	c.lastSeq++
	c.lastAt = at
	c.changed = true
	if kind == "text" {
		c.texts++
	}
	st := &msgState{key: msgKey{c.id, c.lastSeq}, msgID: msgID, found: true, fresh: true, sender: sender, kind: kind, at: at,
		version: 1, body: body, mine: map[int64]string{}, mineChanged: map[int64]bool{}}
	b.msgStates[st.key] = st
	b.msgs = append(b.msgs, msgRow{conv: c.id, seq: c.lastSeq, msgID: msgID, sender: sender, kind: kind, body: body, at: at, st: st,
		ord: c.texts, imported: b.importing})
	if b.importing && c.lastSeq > 1 {
		// Imported history past the creation: no member gets it (a join:
		// its joiner, see memberAdded).
		b.lastGot = nil
		return c.lastSeq
	}
	if c.read {
		b.lastGot = b.fanRead(c, c.lastSeq, at)
		return c.lastSeq
	}
	b.lastGot = nil
	for u := range c.members {
		b.fan = append(b.fan, fanRow{user: u, conv: c.id, kind: projection.KindMessage, seq: c.lastSeq, at: at})
	}
	return c.lastSeq
}

// fanTo gives the message just added (seq) to user in read mode, unless
// it got it already (write mode gives it to every member).
func (b *batch) fanTo(c *convState, user, seq int64, at time.Time) {
	if !c.read || b.lastGot[user] {
		return
	}
	if b.lastGot == nil {
		b.lastGot = map[int64]bool{}
	}
	b.lastGot[user] = true
	b.fan = append(b.fan, fanRow{user: user, conv: c.id, kind: projection.KindMessage, seq: seq, at: at})
}

// mention keeps the mentions of e, the message just added to c, and
// those that count: the members it names at this position, not the
// sender.
func (b *batch) mention(c *convState, e *events.Event) {
	m := &b.msgs[len(b.msgs)-1]
	m.mentions, m.mentionAll = e.Mentions, e.MentionAll
	for _, u := range e.Mentions {
		if u != e.ActorID && c.members[u] {
			m.mentioned = append(m.mentioned, u)
			b.fanTo(c, u, m.seq, m.at) // read mode: the mentioned get it
		}
	}
}

// readOwn moves user's read position in conv past its own message seq.
// A record loaded for this batch learns it too, so that a read event
// later in the batch compares with it.
func (b *batch) readOwn(user, conv, seq int64) {
	k := recKey{user, conv}
	b.reads[k] = max(b.reads[k], seq)
	if rs, ok := b.records[k]; ok && rs.readSeq < seq {
		rs.readSeq = seq
	}
}

func (b *batch) current(user, conv int64) *recState {
	k := recKey{user, conv}
	rs, ok := b.records[k]
	if !ok {
		rs = &recState{}
		b.records[k] = rs
	}
	return rs
}

// record changes a user's record and adds the change to its inbox.
func (b *batch) record(user, conv int64, at time.Time, change func(*recState)) {
	rs := b.current(user, conv)
	change(rs)
	if !rs.dirty {
		rs.dirty = true
		b.recsOrder = append(b.recsOrder, recKey{user, conv})
	}
	b.fan = append(b.fan, fanRow{user: user, conv: conv, kind: projection.KindRecord, rec: rs, at: at})
}

func (b *batch) openSpan(conv, user, seq int64) {
	b.convs[conv].joined[user] = seq
	s := &span{conv: conv, user: user, joined: seq, role: events.RoleMember}
	b.newSpans = append(b.newSpans, s)
	b.openNew[recKey{user, conv}] = s
}

func (b *batch) closeSpan(conv, user, seq int64) {
	delete(b.convs[conv].joined, user)
	k := recKey{user, conv}
	if s, ok := b.openNew[k]; ok {
		s.left = seq
		delete(b.openNew, k)
		return
	}
	b.closes = append(b.closes, span{conv: conv, user: user, left: seq})
}
