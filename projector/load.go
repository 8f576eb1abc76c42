package projector

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/events"
)

// Loading: the first round trip of a batch locks its partitions' offsets
// and reads the state its events depend on.

const (
	sqlEnsureOffsets = `INSERT INTO consumer_offsets (topic, "partition", next_offset)
SELECT $1, p, 0 FROM unnest($2::int[]) AS p ORDER BY p ON CONFLICT DO NOTHING`
	sqlLockOffsets = `SELECT "partition", next_offset, delivery_base FROM consumer_offsets
WHERE topic = $1 AND "partition" = ANY($2::int[]) ORDER BY "partition" FOR UPDATE`
	sqlLockConversations = `SELECT id, last_seq, created_by, text_count, read_fanout, channel, member_count, change_count,
  roles, owner_id, title, frozen, slow_mode
FROM conversations WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE`
	// sqlCurrentMembers reads the current members of the batch's
	// conversations: all of them, or only the users the batch names ($3) in
	// a read-mode conversation that cannot switch down within the batch
	// (partialMembers in SQL: $2 the batch's removals per conversation, $4
	// the threshold). Two selects, so that each uses its index.
	//
	// The second is driven by the users, one index probe each
	// (member_spans_user), in a LATERAL kept from being flattened (OFFSET
	// 0). Written as one join, the planner estimated the members of the
	// read-mode conversation by the average conversation (82 rows) and,
	// once the batch named a few hundred users, scanned all 100,000
	// members of it for them: 19 ms a batch instead of 1.6 (EXPLAIN
	// ANALYZE with a 100,000-member conversation, 318 users), the most
	// sampled statement of the large-conversation bench.
	sqlCurrentMembers = `SELECT m.conversation_id, m.user_id, m.joined_seq, m.role FROM member_spans m
WHERE m.conversation_id = ANY(ARRAY(` + sqlPartial + ` NOT partial)) AND m.left_seq IS NULL
UNION ALL
SELECT m.conversation_id, m.user_id, m.joined_seq, m.role FROM unnest($3::bigint[]) AS u(id),
LATERAL (SELECT s.conversation_id, s.user_id, s.joined_seq, s.role FROM member_spans s
  WHERE s.user_id = u.id AND s.conversation_id = ANY(ARRAY(` + sqlPartial + ` partial)) AND s.left_seq IS NULL OFFSET 0) m`
	// sqlPartial selects the batch's conversations by partialMembers (the
	// condition follows it): each half of sqlCurrentMembers then scans its
	// index with a plain array of ids.
	sqlPartial = `SELECT id FROM (SELECT c.id, c.read_fanout AND CASE WHEN c.channel THEN c.member_count > $4::bigint
    ELSE c.member_count > greatest($4::bigint, $4::bigint / 2 + k.removals) END AS partial
  FROM conversations c JOIN unnest($1::bigint[], $2::bigint[]) AS k(id, removals) ON k.id = c.id) p WHERE`
	// sqlArmed reads the armed members of the batch's read-mode conversations.
	sqlArmed        = `SELECT conversation_id, user_id FROM records WHERE conversation_id = ANY($1::bigint[]) AND armed`
	sqlKnownMsgIDs  = `SELECT msg_id::text FROM messages WHERE msg_id = ANY($1::uuid[])`
	sqlKnownChanges = `SELECT change_id::text FROM changes WHERE change_id = ANY($1::uuid[])`
	sqlMessageState = `SELECT m.conversation_id, m.seq, m.msg_id::text, m.sender_id, m.kind, m.created_at, m.deleted, m.version, m.body,
  m.reply_to, m.reactions, m.attachments
FROM messages m JOIN unnest($1::bigint[], $2::bigint[]) AS k(c, s) ON m.conversation_id = k.c AND m.seq = k.s`
	sqlActorReactions = `SELECT r.conversation_id, r.seq, r.user_id, r.emoji
FROM reactions r JOIN unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS k(c, s, u)
  ON r.conversation_id = k.c AND r.seq = k.s AND r.user_id = k.u`
	sqlRecords = `SELECT r.user_id, r.conversation_id, r.pinned, r.muted, r.read_seq, r.removed
FROM records r JOIN unnest($1::bigint[], $2::bigint[]) AS k(u, c) ON r.user_id = k.u AND r.conversation_id = k.c`
	// sqlMembersRecords reads the records of the current members of the
	// write-mode conversations $1 (a conversation.updated gives each a
	// new version): by the members' index, then each record by its key.
	sqlMembersRecords = `SELECT r.user_id, r.conversation_id, r.pinned, r.muted, r.read_seq, r.removed
FROM member_spans s JOIN conversations c ON c.id = s.conversation_id AND NOT c.read_fanout
JOIN records r ON r.user_id = s.user_id AND r.conversation_id = s.conversation_id
WHERE s.conversation_id = ANY($1::bigint[]) AND s.left_seq IS NULL`
)

// sqlGenericPlans makes the batch's statements run their prepared
// generic plans. PostgreSQL's default (plan_cache_mode auto) plans a
// statement again for every execution while that plan looks cheaper than
// the generic one, and for a batch's few keys in an array it always
// does: the reads of known msg ids and body keys and the move of senders'
// read positions were planned on every batch, at two to eight times their
// execution (docs/decisions.md, "Measured reasons behind defaults"). Only
// for a live batch (genericPlanRecords at most): the generic plans assume
// a few keys, and a batch of thousands (catching up) applies faster with
// plans made for its arrays, whose cost its rows amortise.
const sqlGenericPlans = `SET LOCAL plan_cache_mode = force_generic_plan`

// genericPlanRecords is the most records of a batch that runs generic
// plans (sqlGenericPlans).
const genericPlanRecords = 16

// nextOffsets returns, per partition of recs, the next offset after them,
// and the partitions in order.
func nextOffsets(recs []Record) (map[int32]int64, []int32) {
	parts := map[int32]int64{}
	for _, r := range recs {
		if r.Offset+1 > parts[r.Partition] {
			parts[r.Partition] = r.Offset + 1
		}
	}
	ids := make([]int32, 0, len(parts))
	for pt := range parts {
		ids = append(ids, pt)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return parts, ids
}

// lockAndLoad locks the offsets of partIDs (and reads them into t.stored),
// fences, and loads the state the batch depends on, in one round trip that
// begins the transaction when t owns it.
func (t *txn) lockAndLoad(ctx context.Context, recs []Record, partIDs []int32) error {
	topic := t.p.cfg.Topic
	t.stored = map[int32]int64{}
	bt := &pgx.Batch{}
	if t.own {
		bt.Queue("BEGIN")
		if len(recs) <= genericPlanRecords {
			bt.Queue(sqlGenericPlans)
		}
	}
	fence := int64(0)
	if t.p.cfg.PlacementVersion > 0 {
		// First of the batch's locks (shared): a move's raise of the fence
		// waits for this batch, and every later one sees the raise.
		bt.Queue(sqlFence).QueryRow(func(row pgx.Row) error { return row.Scan(&fence) })
	}
	if ensure := t.p.unknownParts(t.own, partIDs); len(ensure) > 0 {
		bt.Queue(sqlEnsureOffsets, topic, ensure)
	}
	t.bases = map[int32]int64{}
	queueLockOffsets(bt, topic, partIDs, t.stored, t.bases)
	// The state the batch depends on is read in the same round trip, after
	// the offset locks (lock order: offsets, conversations, users), for
	// every record: those already applied only add a few rows. The
	// conversations the cache holds (convcache.go) are not read, unless
	// the offsets locked here say that the cache is behind.
	t.convParts = convPartitions(recs)
	var hits map[int64]cacheHit
	if t.own {
		// The generation first: a clear between it and the lookup
		// only makes the batch store nothing.
		t.gen = t.p.cache.generation()
		hits = t.p.cache.lookup(t.convParts)
	}
	k := queueLoad(bt, t.b, recs, hits)
	t.loaded = k.loaded
	if err := t.tx.SendBatch(ctx, bt).Close(); err != nil {
		return fmt.Errorf("lock offsets of %s and load the batch's state: %w", topic, err)
	}
	if err := fenced(t.p.cfg.PlacementVersion, fence); err != nil {
		return err
	}
	if len(t.stored) != len(partIDs) {
		t.p.forget()
		return &FencedError{Msg: fmt.Sprintf("lock offsets of %s: %d of %d partitions have a row", topic, len(t.stored), len(partIDs))}
	}
	return t.takeCached(ctx, k, hits)
}

// convPartitions maps each conversation of recs to its partition (-1 for
// one that comes from more than one: it is never cached).
func convPartitions(recs []Record) map[int64]int32 {
	m := map[int64]int32{}
	for _, r := range recs {
		if r.Event == nil || r.DeadLetter || events.UserLevel(r.Event.Type) {
			continue
		}
		id := r.Event.ConversationID
		if pt, ok := m[id]; ok && pt != r.Partition {
			m[id] = -1
			continue
		}
		m[id] = r.Partition
	}
	return m
}

// takeCached puts the cached conversations whose partitions' stored
// offsets are what the cache expects into the batch, and reads the others
// (the cache was behind) in a round trip of their own.
func (t *txn) takeCached(ctx context.Context, k loadKeys, hits map[int64]cacheHit) error {
	if len(hits) == 0 {
		return nil
	}
	var stale []int64
	for id, h := range hits {
		if t.stored[h.conv.partition] == h.want {
			t.b.convs[id] = h.state(id)
			t.cached++
			continue
		}
		stale = append(stale, id)
	}
	if len(stale) == 0 {
		return nil
	}
	t.behind = len(stale)
	sort.Slice(stale, func(i, j int) bool { return stale[i] < stale[j] })
	removals := make([]int64, len(stale))
	for i, id := range stale {
		removals[i] = k.removalsOf(id)
	}
	bt := &pgx.Batch{}
	queueConversations(bt, t.b, stale, removals, k.users)
	if err := t.tx.SendBatch(ctx, bt).Close(); err != nil {
		return fmt.Errorf("load the state of %d conversations the cache was behind on: %w", len(stale), err)
	}
	return nil
}

// queueLockOffsets queues the lock of topic's offset rows of partIDs, read
// into stored, and their delivery bases into bases (when not nil).
func queueLockOffsets(bt *pgx.Batch, topic string, partIDs []int32, stored, bases map[int32]int64) {
	bt.Queue(sqlLockOffsets, topic, partIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var pt int32
			var next, base int64
			if err := rows.Scan(&pt, &next, &base); err != nil {
				return err
			}
			stored[pt] = next
			if bases != nil {
				bases[pt] = base
			}
		}
		return rows.Err()
	})
}

// loadKeys is what the state of a batch is read by.
type loadKeys struct {
	convIDs            []int64 // in id order, the lock order
	loaded             int     // how many of them queueLoad reads (not cached)
	removals           []int64 // per convIDs: the batch's member.removed events
	users              []int64 // the users the batch names (actors, targets, mentioned)
	msgIDs             []string
	recUsers, recConvs []int64 // the (user, conversation) pairs of records
	// The changes of messages: their ids, the messages (conversation, seq)
	// and the actors' reactions on them.
	changeIDs                         []string
	sealed                            []string // msg_ids of sealed bodies
	attached                          []string // msg_ids of sends with attachments
	msgConvs, msgSeqs                 []int64
	reactConvs, reactSeqs, reactUsers []int64
	// Reports (reports.go): the report ids, and the reported messages
	// with their reporters.
	reportIDs                          []string
	reportConvs, reportSeqs, reporters []int64
	// Bans and mutes (sanctions.go): the (conversation, user) pairs
	// whose sanctions the events' judgement reads.
	sanctionConvs, sanctionUsers []int64
	// Settings (settings.go): the conversations whose members' records
	// a conversation.updated may give a new version.
	touchConvs []int64
}

// need adds to b a conversation (not known to exist yet) for every event
// of recs and returns the keys of the state the events depend on.
func (b *batch) need(recs []Record) loadKeys {
	k := loadKeys{convIDs: []int64{}, recUsers: []int64{}, recConvs: []int64{}}
	seenPair := map[recKey]bool{}
	named := map[int64]bool{}
	removals := map[int64]int64{}
	seenSanction := map[recKey]bool{}
	name := func(ids ...int64) {
		for _, u := range ids {
			if u > 0 && !named[u] {
				named[u] = true
				k.users = append(k.users, u)
			}
		}
	}
	wantRecord := func(u, c int64) {
		p := recKey{u, c}
		if !seenPair[p] {
			seenPair[p] = true
			k.recUsers = append(k.recUsers, u)
			k.recConvs = append(k.recConvs, c)
		}
	}
	for _, r := range recs {
		e := r.Event
		if e == nil || r.DeadLetter || events.UserLevel(e.Type) {
			continue // a user-level event reads nothing (blocks.go)
		}
		if _, ok := b.convs[e.ConversationID]; !ok {
			b.convs[e.ConversationID] = &convState{id: e.ConversationID, members: map[int64]bool{}, joined: map[int64]int64{}}
			k.convIDs = append(k.convIDs, e.ConversationID)
		}
		if e.SealedBody != "" {
			k.sealed = append(k.sealed, e.MsgID)
		}
		name(e.ActorID, e.UserID)
		name(e.Mentions...)
		if e.Type == events.MemberRemoved || e.Type == events.MemberBanned {
			removals[e.ConversationID]++
		}
		if p, ok := sanctionPair(e); ok && !seenSanction[p] {
			seenSanction[p] = true
			k.sanctionUsers, k.sanctionConvs = append(k.sanctionUsers, p.user), append(k.sanctionConvs, p.conv)
		}
		switch e.Type {
		case events.MessageSent:
			k.msgIDs = append(k.msgIDs, e.MsgID)
			if e.HasAttachments() {
				k.attached = append(k.attached, e.MsgID)
			}
		case events.ConversationCreated, events.MemberAdded, events.MemberRemoved, events.MemberRoleSet,
			events.MemberBanned, events.MemberUnbanned, events.MemberMuted, events.MemberUnmuted, events.ConversationUpdated:
			k.msgIDs = append(k.msgIDs, e.EventID)
			if e.Type == events.ConversationUpdated {
				k.touchConvs = append(k.touchConvs, e.ConversationID)
			}
			if e.Type == events.MemberRoleSet {
				wantRecord(e.UserID, e.ConversationID) // its record shows the role
			}
			if e.Type == events.MemberAdded || e.Type == events.MemberRemoved || e.Type == events.MemberBanned {
				wantRecord(e.UserID, e.ConversationID)
			}
		case events.RecordUpdated, events.ReadUpdated:
			wantRecord(e.ActorID, e.ConversationID)
		case events.MessageEdited, events.MessageDeleted, events.ReactionAdded, events.ReactionRemoved, events.MessageThumbnailed:
			k.changeIDs = append(k.changeIDs, e.ChangeID)
			k.msgConvs, k.msgSeqs = append(k.msgConvs, e.ConversationID), append(k.msgSeqs, e.Seq)
			k.reactConvs, k.reactSeqs = append(k.reactConvs, e.ConversationID), append(k.reactSeqs, e.Seq)
			k.reactUsers = append(k.reactUsers, e.ActorID)
		case events.MessageReported, events.ReportResolved:
			k.needReport(e)
		}
	}
	sort.Slice(k.convIDs, func(i, j int) bool { return k.convIDs[i] < k.convIDs[j] })
	k.removals = make([]int64, len(k.convIDs))
	for i, id := range k.convIDs {
		k.removals[i] = removals[id]
	}
	return k
}

// loadedConv marks conversation id as existing with last seq last and
// texts text messages.
func (b *batch) loadedConv(id, last, by, texts int64) {
	c := b.convs[id]
	c.exists, c.lastSeq, c.loadedAt, c.by, c.texts = true, last, last, by, texts
}

// loadedMode sets a loaded conversation's read fan-out state; removals
// are the batch's member.removed events of it.
func (b *batch) loadedMode(id int64, read, channel bool, count, changes, removals int64) {
	c := b.convs[id]
	c.read, c.channel, c.memberCount, c.changeCount = read, channel, count, changes
	c.partial = partialMembers(read, channel, count, removals, b.threshold)
}

// loadedMember marks user u a current member of conversation c since seq
// joined, of role role.
func (b *batch) loadedMember(c, u, joined int64, role string) {
	cs := b.convs[c]
	cs.members[u] = true
	cs.joined[u] = joined
	if role != events.RoleMember {
		if cs.roles == nil {
			cs.roles = map[int64]string{}
		}
		cs.roles[u] = role
	}
}

// removalsOf returns the batch's member.removed events of conversation id.
func (k loadKeys) removalsOf(id int64) int64 {
	i := sort.Search(len(k.convIDs), func(i int) bool { return k.convIDs[i] >= id })
	if i < len(k.convIDs) && k.convIDs[i] == id {
		return k.removals[i]
	}
	return 0
}

// queueLoad queues the reads and locks of the state the batch's events
// depend on, but for the conversations in cached, and returns their keys.
func queueLoad(bt *pgx.Batch, b *batch, live []Record, cached map[int64]cacheHit) loadKeys {
	k := b.need(live)
	// The conversation locks first (in id order), then the reads that
	// depend only on the batch.
	ids, removals := k.convIDs, k.removals
	if len(cached) > 0 {
		ids, removals = nil, nil
		for i, id := range k.convIDs {
			if _, ok := cached[id]; !ok {
				ids, removals = append(ids, id), append(removals, k.removals[i])
			}
		}
	}
	if len(ids) > 0 {
		queueConversations(bt, b, ids, removals, k.users)
	}
	queueLoadRest(bt, b, k)
	k.loaded = len(ids)
	return k
}

// queueConversations queues the lock and the reads of conversations ids
// (in id order; removals are the batch's member.removed events of each):
// their rows, armed members and current members (or those of users in a
// read-mode conversation, sqlCurrentMembers).
func queueConversations(bt *pgx.Batch, b *batch, ids, removals, users []int64) {
	removalsOf := map[int64]int64{}
	for i, id := range ids {
		removalsOf[id] = removals[i]
	}
	bt.Queue(sqlLockConversations, ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id, last, by, texts, count, changes, owner int64
			var read, channel, enforced, frozen bool
			var title string
			var slow int
			if err := rows.Scan(&id, &last, &by, &texts, &read, &channel, &count, &changes, &enforced, &owner,
				&title, &frozen, &slow); err != nil {
				return err
			}
			b.loadedConv(id, last, by, texts)
			c := b.convs[id]
			c.enforced, c.owner = enforced, owner
			c.title, c.frozen, c.slowMode = title, frozen, slow
			b.loadedMode(id, read, channel, count, changes, removalsOf[id])
		}
		return rows.Err()
	})
	bt.Queue(sqlArmed, ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c, u int64
			if err := rows.Scan(&c, &u); err != nil {
				return err
			}
			if b.convs[c].armed == nil {
				b.convs[c].armed = map[int64]bool{}
			}
			b.convs[c].armed[u] = true
		}
		return rows.Err()
	})
	bt.Queue(sqlCurrentMembers, ids, removals, users, b.threshold).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c, u, joined int64
			var role string
			if err := rows.Scan(&c, &u, &joined, &role); err != nil {
				return err
			}
			b.loadedMember(c, u, joined, role)
		}
		return rows.Err()
	})
}

// queueLoadRest queues the reads of the state the batch's events depend on
// beyond their conversations.
func queueLoadRest(bt *pgx.Batch, b *batch, k loadKeys) {
	if len(k.msgIDs) > 0 {
		bt.Queue(sqlKnownMsgIDs, k.msgIDs).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return err
				}
				b.known.add(id)
			}
			return rows.Err()
		})
	}
	if len(k.changeIDs) > 0 {
		queueLoadChanges(bt, b, k)
	}
	queueLoadReports(bt, b, k)
	if len(k.sanctionConvs) > 0 {
		queueLoadSanctions(bt, b, k.sanctionConvs, k.sanctionUsers)
	}
	if len(k.sealed) > 0 {
		queueLoadKeys(bt, b, k.sealed)
	}
	if len(k.attached) > 0 {
		queueLoadClaims(bt, b, k.attached)
	}
	if len(k.touchConvs) > 0 {
		queueLoadRecords(bt, b, sqlMembersRecords, k.touchConvs)
	}
	if len(k.recUsers) > 0 {
		queueLoadRecords(bt, b, sqlRecords, k.recUsers, k.recConvs)
	}
}

// queueLoadRecords queues sql, a read of records (sqlRecords'
// columns), into b.records.
func queueLoadRecords(bt *pgx.Batch, b *batch, sql string, args ...any) {
	bt.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var key recKey
			r := &recState{}
			if err := rows.Scan(&key.user, &key.conv, &r.pinned, &r.muted, &r.readSeq, &r.removed); err != nil {
				return err
			}
			b.records[key] = r
		}
		return rows.Err()
	})
}

// queueLoadChanges queues the reads the changes of messages depend on:
// which change ids are applied, the messages' states and the actors'
// reactions.
func queueLoadChanges(bt *pgx.Batch, b *batch, k loadKeys) {
	bt.Queue(sqlKnownChanges, k.changeIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			b.knownChanges.add(id)
		}
		return rows.Err()
	})
	bt.Queue(sqlMessageState, k.msgConvs, k.msgSeqs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c, s int64
			var replyTo *int64
			var reactions map[string]int64
			st := &msgState{found: true, mine: map[int64]string{}, mineChanged: map[int64]bool{}}
			if err := rows.Scan(&c, &s, &st.msgID, &st.sender, &st.kind, &st.at, &st.deleted, &st.version, &st.body,
				&replyTo, &reactions, &st.attachments); err != nil {
				return err
			}
			st.key = msgKey{c, s}
			if replyTo != nil {
				st.replyTo = *replyTo
			}
			if len(reactions) > 0 {
				st.reactions = reactions
			}
			b.msgStates[st.key] = st
		}
		return rows.Err()
	})
	bt.Queue(sqlActorReactions, k.reactConvs, k.reactSeqs, k.reactUsers).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c, s, u int64
			var emoji string
			if err := rows.Scan(&c, &s, &u, &emoji); err != nil {
				return err
			}
			b.msgFor(c, s).mine[u] = emoji
		}
		return rows.Err()
	})
}

// queueLoadKeys reads the keys of the batch's sealed bodies. They live
// beside the projections (public), never in a replay's shadow schema.
func queueLoadKeys(bt *pgx.Batch, b *batch, msgIDs []string) {
	bt.Queue(`SELECT msg_id::text, key FROM public.body_keys WHERE msg_id = ANY($1::uuid[])`, msgIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id string
			var key []byte
			if err := rows.Scan(&id, &key); err != nil {
				return err
			}
			b.bodyKeys[id] = key
		}
		return rows.Err()
	})
}
