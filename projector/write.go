package projector

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/projection"
)

// Writing: the users of a batch are locked and its entries numbered, then
// its rows, offsets and notifications are written.

const (
	sqlEnsureUsers = `INSERT INTO users (id) SELECT u FROM unnest($1::bigint[]) AS u ORDER BY u ON CONFLICT DO NOTHING`
	sqlLockUsers   = `SELECT id, inbox_seq, record_version FROM users WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE`

	sqlInsertConversations = `INSERT INTO conversations (id, title, created_by, created_at, last_seq, last_at, text_count,
  read_fanout, channel, member_count, change_count, roles, owner_id, frozen, slow_mode)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::timestamptz[], $5::bigint[], $6::timestamptz[], $7::bigint[],
  $8::bool[], $9::bool[], $10::bigint[], $11::bigint[], $12::bool[], $13::bigint[], $14::bool[], $15::int[])
ON CONFLICT DO NOTHING`
	sqlUpdateConversations = `UPDATE conversations c SET last_seq = u.s, last_at = u.t, text_count = u.n,
  read_fanout = u.r, member_count = u.mc, change_count = u.cc, owner_id = u.o, title = u.title, frozen = u.f, slow_mode = u.sm
FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[], $4::bigint[], $5::bool[], $6::bigint[], $7::bigint[], $8::bigint[],
  $9::text[], $10::bool[], $11::int[])
  AS u(id, s, t, n, r, mc, cc, o, title, f, sm) WHERE c.id = u.id`
	sqlInsertModes = `INSERT INTO conversation_modes (conversation_id, from_seq, read_fanout)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bool[]) ON CONFLICT DO NOTHING`
	// sqlSetArmed writes the armed flags the batch changed (after
	// sqlUpsertRecords: the rows exist).
	sqlSetArmed = `UPDATE records r SET armed = u.a
FROM unnest($1::bigint[], $2::bigint[], $3::bool[]) AS u(usr, c, a)
WHERE r.user_id = u.usr AND r.conversation_id = u.c AND r.armed <> u.a`
	sqlInsertSpans = `INSERT INTO member_spans (conversation_id, user_id, joined_seq, left_seq, role)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[])`
	// sqlSetRoles sets the roles of spans open before the batch (before
	// sqlCloseSpans, so that a span the batch closes leaves with the role
	// it had, whatever the cut of the log into batches).
	sqlSetRoles = `UPDATE member_spans m SET role = u.r
FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS u(c, usr, r)
WHERE m.conversation_id = u.c AND m.user_id = u.usr AND m.left_seq IS NULL AND m.role <> u.r`
	sqlCloseSpans = `UPDATE member_spans m SET left_seq = u.l
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS u(c, usr, l)
WHERE m.conversation_id = u.c AND m.user_id = u.usr AND m.left_seq IS NULL`
	sqlUpsertRecords = `INSERT INTO records (user_id, conversation_id, pinned, muted, read_seq, version, removed)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bool[], $4::bool[], $5::bigint[], $6::bigint[], $7::bool[])
ON CONFLICT (user_id, conversation_id) DO UPDATE SET pinned = excluded.pinned, muted = excluded.muted,
read_seq = excluded.read_seq, version = excluded.version, removed = excluded.removed`
	// sqlReadOwn moves senders' read positions past their messages (after
	// sqlUpsertRecords; one row per pair).
	sqlReadOwn = `UPDATE records r SET read_seq = u.s
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS u(usr, c, s)
WHERE r.user_id = u.usr AND r.conversation_id = u.c AND r.read_seq < u.s`
	sqlInsertMentions = `INSERT INTO mentions (user_id, conversation_id, seq)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) ON CONFLICT DO NOTHING`
	sqlUpdateUsers = `UPDATE users SET inbox_seq = u.h, record_version = u.v
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS u(id, h, v) WHERE users.id = u.id`
	sqlInsertRejections = `INSERT INTO rejections (event_id, msg_id, event_type, conversation_id, actor_id, reason, topic, "partition", "offset", rejected_at)
SELECT e, m, t, c, a, r, $7, p, o, now() FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $8::int[], $9::bigint[]) AS u(e, m, t, c, a, r, p, o)
ON CONFLICT DO NOTHING`
	sqlUpdateOffsets = `UPDATE consumer_offsets o SET next_offset = u.n, updated_at = now()
FROM unnest($2::int[], $3::bigint[]) AS u(p, n) WHERE o.topic = $1 AND o."partition" = u.p`
)

type head struct{ inbox, version int64 }

// assign locks the users of the batch in id order and reads their heads
// into t.heads.
func (t *txn) assign(ctx context.Context) error {
	t.heads = map[int64]*head{}
	if len(t.b.fan) == 0 {
		return nil
	}
	ids := make([]int64, 0)
	for _, f := range t.b.fan {
		if _, ok := t.heads[f.user]; !ok {
			t.heads[f.user] = &head{}
			ids = append(ids, f.user)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	bt := &pgx.Batch{}
	if ensure := t.p.unknownUsers(t.own, ids); len(ensure) > 0 {
		bt.Queue(sqlEnsureUsers, ensure)
	}
	locked := 0
	bt.Queue(sqlLockUsers, ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id int64
			h := &head{}
			if err := rows.Scan(&id, &h.inbox, &h.version); err != nil {
				return err
			}
			t.heads[id] = h
			locked++
		}
		return rows.Err()
	})
	if err := t.tx.SendBatch(ctx, bt).Close(); err != nil {
		return fmt.Errorf("create and lock users: %w", err)
	}
	if locked != len(ids) {
		t.p.forget() // a row thought to exist does not: ensure them all next time
		return fmt.Errorf("lock users: %d of %d have a row", locked, len(ids))
	}
	return nil
}

// smallWriteRows is the most inbox rows (and messages) a batch writes with
// INSERTs in its pipeline rather than with COPY.
const smallWriteRows = 2000

// write writes the batch's rows, its offsets and its notifications.
func (t *txn) write(ctx context.Context) error {
	number(t.b.fan, t.heads)
	bt := &pgx.Batch{}
	t.queueConversations(bt)
	t.queueSpans(bt)
	t.queueSanctions(bt)
	t.queueBlocks(bt)
	t.queueRecords(bt)
	t.b.queueArmed(bt)
	t.queueReads(bt)
	t.b.queueImportedRead(bt)
	t.queueHeads(bt)
	t.queueRejections(bt)
	t.queueOffsets(bt)
	t.b.queueChanges(bt)
	t.b.queueReports(bt)
	t.b.queueUploads(bt)
	if err := t.queueOutbox(bt); err != nil {
		return err
	}
	// A small batch (the live case: a few messages) writes its rows and its
	// notifications in the same pipeline as the rest, one round trip; a
	// large one (catching up) copies its rows, which is faster in bulk.
	small := len(t.b.fan) <= smallWriteRows && len(t.b.msgs) <= smallWriteRows
	if small {
		if err := queueMessages(bt, t.b.msgs); err != nil {
			return err
		}
		queueInbox(bt, t.b.fan)
		t.queueNotify(bt, true)
		if t.own {
			bt.Queue("COMMIT")
		}
	}
	if err := t.tx.SendBatch(ctx, bt).Close(); err != nil {
		return fmt.Errorf("write projections: %w", err)
	}
	if small {
		return nil
	}
	return t.copyRows(ctx)
}

// number numbers the inbox entries and record versions in batch order,
// which keeps each conversation's entries ascending in every inbox (I4).
func number(fan []fanRow, heads map[int64]*head) {
	for i := range fan {
		f := &fan[i]
		h := heads[f.user]
		h.inbox++
		f.inbox = h.inbox
		switch f.kind {
		case projection.KindRecord:
			h.version++
			f.version = h.version
			f.rec.version = f.version
		case projection.KindUpdate:
			f.version = f.msg.version // the message's version at the end of the batch
		}
	}
}

func (t *txn) queueConversations(bt *pgx.Batch) {
	var ins, upd convCols
	for _, c := range t.b.convs {
		switch {
		case c.created:
			ins.add(c)
		case c.changed: // every join and removal is a message: the count moves with last_seq
			upd.add(c)
		}
	}
	if len(ins.ids) > 0 {
		bt.Queue(sqlInsertConversations, ins.ids, ins.titles, ins.by, ins.at, ins.last, ins.lastAt, ins.texts,
			ins.read, ins.channel, ins.count, ins.changes, ins.roles, ins.owner, ins.frozen, ins.slow)
	}
	if len(upd.ids) > 0 {
		bt.Queue(sqlUpdateConversations, upd.ids, upd.last, upd.lastAt, upd.texts, upd.read, upd.count, upd.changes, upd.owner,
			upd.titles, upd.frozen, upd.slow)
	}
	t.b.queueModes(bt)
}

// convCols are the columns of conversation rows to write.
type convCols struct {
	ids, by, last, texts, count, changes, owner []int64
	titles                                      []string
	at, lastAt                                  []time.Time
	read, channel, roles, frozen                []bool
	slow                                        []int
}

func (cc *convCols) add(c *convState) {
	cc.ids, cc.titles, cc.by, cc.at = append(cc.ids, c.id), append(cc.titles, c.title), append(cc.by, c.by), append(cc.at, c.at)
	cc.last, cc.lastAt, cc.texts = append(cc.last, c.lastSeq), append(cc.lastAt, c.lastAt), append(cc.texts, c.texts)
	cc.read, cc.channel = append(cc.read, c.read), append(cc.channel, c.channel)
	cc.count, cc.changes = append(cc.count, c.memberCount), append(cc.changes, c.changeCount)
	cc.roles, cc.owner = append(cc.roles, c.enforced), append(cc.owner, c.owner)
	cc.frozen, cc.slow = append(cc.frozen, c.frozen), append(cc.slow, c.slowMode)
}

func (t *txn) queueSpans(bt *pgx.Batch) {
	if n := len(t.b.spanRoles); n > 0 {
		cs, us, rs := make([]int64, 0, n), make([]int64, 0, n), make([]string, 0, n)
		for k, r := range t.b.spanRoles {
			cs, us, rs = append(cs, k.conv), append(us, k.user), append(rs, r)
		}
		bt.Queue(sqlSetRoles, cs, us, rs)
	}
	if len(t.b.closes) > 0 {
		cs, us, ls := make([]int64, len(t.b.closes)), make([]int64, len(t.b.closes)), make([]int64, len(t.b.closes))
		for i, s := range t.b.closes {
			cs[i], us[i], ls[i] = s.conv, s.user, s.left
		}
		bt.Queue(sqlCloseSpans, cs, us, ls)
	}
	if len(t.b.newSpans) > 0 {
		n := len(t.b.newSpans)
		cs, us, js, ls, rs := make([]int64, n), make([]int64, n), make([]int64, n), make([]*int64, n), make([]string, n)
		for i, s := range t.b.newSpans {
			cs[i], us[i], js[i], rs[i] = s.conv, s.user, s.joined, s.role
			if s.left != 0 {
				l := s.left
				ls[i] = &l
			}
		}
		bt.Queue(sqlInsertSpans, cs, us, js, ls, rs)
	}
}

func (t *txn) queueRecords(bt *pgx.Batch) {
	n := len(t.b.recsOrder)
	if n == 0 {
		return
	}
	us, cs, rs, vs := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	pins, mutes, rems := make([]bool, n), make([]bool, n), make([]bool, n)
	for i, k := range t.b.recsOrder {
		r := t.b.records[k]
		us[i], cs[i], rs[i], vs[i] = k.user, k.conv, r.readSeq, r.version
		pins[i], mutes[i], rems[i] = r.pinned, r.muted, r.removed
	}
	bt.Queue(sqlUpsertRecords, us, cs, pins, mutes, rs, vs, rems)
}

// queueReads queues the moves of senders' read positions past their own
// messages and the mentions of the batch's messages.
func (t *txn) queueReads(bt *pgx.Batch) {
	if n := len(t.b.reads); n > 0 {
		us, cs, ss := make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		for k, s := range t.b.reads {
			us, cs, ss = append(us, k.user), append(cs, k.conv), append(ss, s)
		}
		bt.Queue(sqlReadOwn, us, cs, ss)
	}
	var us, cs, ss []int64
	for _, m := range t.b.msgs {
		for _, u := range m.mentioned {
			us, cs, ss = append(us, u), append(cs, m.conv), append(ss, m.seq)
		}
	}
	if len(us) > 0 {
		bt.Queue(sqlInsertMentions, us, cs, ss)
	}
}

func (t *txn) queueHeads(bt *pgx.Batch) {
	n := len(t.heads)
	if n == 0 {
		return
	}
	ids, hs, vs := make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
	for id, h := range t.heads {
		ids, hs, vs = append(ids, id), append(hs, h.inbox), append(vs, h.version)
	}
	bt.Queue(sqlUpdateUsers, ids, hs, vs)
}

func (t *txn) queueRejections(bt *pgx.Batch) {
	n := len(t.b.rejects)
	if n == 0 {
		return
	}
	es, ms, ts, rs := make([]string, n), make([]*string, n), make([]string, n), make([]string, n)
	cs, as, os := make([]int64, n), make([]int64, n), make([]int64, n)
	ps := make([]int32, n)
	for i, r := range t.b.rejects {
		es[i], ts[i], rs[i], cs[i], as[i], ps[i], os[i] = r.eventID, r.typ, r.reason, r.conv, r.actor, r.partition, r.offset
		if r.msgID != "" {
			m := r.msgID
			ms[i] = &m
		}
	}
	bt.Queue(sqlInsertRejections, es, ms, ts, cs, as, rs, t.p.cfg.Topic, ps, os)
}

// queueOffsets moves the stored offsets past the batch.
func (t *txn) queueOffsets(bt *pgx.Batch) {
	var ps []int32
	var ns []int64
	for pt, next := range t.parts {
		if next > t.stored[pt] {
			ps, ns = append(ps, pt), append(ns, next)
		}
	}
	bt.Queue(sqlUpdateOffsets, t.p.cfg.Topic, ps, ns)
}

const (
	sqlInsertMessages = `INSERT INTO messages (conversation_id, seq, msg_id, sender_id, kind, body, created_at,
  version, edited_at, deleted, reply_to, reactions, ord, mentions, mention_all, changed_ord, sender_name, imported, attachments)
SELECT m.c, m.s, m.id, m.snd, m.k, m.b, m.t, m.v, m.e, m.d, m.r, m.x, m.o,
  CASE WHEN m.mn = '' THEN NULL ELSE string_to_array(m.mn, ',')::bigint[] END, m.ma, m.co, NULLIF(m.sn, ''), m.im, m.att
FROM unnest($1::bigint[], $2::bigint[], $3::uuid[], $4::bigint[], $5::text[], $6::text[], $7::timestamptz[],
  $8::bigint[], $9::timestamptz[], $10::bool[], $11::bigint[], $12::jsonb[], $13::bigint[], $14::text[], $15::bool[],
  $16::bigint[], $17::text[], $18::bool[], $19::jsonb[])
  AS m(c, s, id, snd, k, b, t, v, e, d, r, x, o, mn, ma, co, sn, im, att)`
	sqlInsertInbox = `INSERT INTO inbox (user_id, inbox_seq, conversation_id, kind, seq, version, created_at)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::smallint[], $5::bigint[], $6::bigint[], $7::timestamptz[])`
)

// queueMessages queues the INSERT of msgs.
func queueMessages(bt *pgx.Batch, msgs []msgRow) error {
	n := len(msgs)
	if n == 0 {
		return nil
	}
	cs, ss, senders := make([]int64, n), make([]int64, n), make([]int64, n)
	ids := make([]uuid.UUID, n)
	kinds, bodies := make([]string, n), make([]string, n)
	ats := make([]time.Time, n)
	vs, edits, dels, replies, reacts := make([]int64, n), make([]*time.Time, n), make([]bool, n), make([]*int64, n), make([]map[string]int64, n)
	ords, mentions, alls, cos, ims := make([]int64, n), make([]string, n), make([]bool, n), make([]int64, n), make([]bool, n)
	names := make([]string, n)
	atts := make([]*string, n)
	for i, m := range msgs {
		a, err := attachmentsJSON(m.st)
		if err != nil {
			return err
		}
		atts[i] = a
		ords[i], mentions[i], alls[i], cos[i], ims[i] = m.ord, joinIDs(m.mentions), m.mentionAll, m.st.changedOrd, m.imported
		names[i] = m.senderName
		id, err := uuid.Parse(m.msgID)
		if err != nil {
			return fmt.Errorf("msg id %q: %w", m.msgID, err)
		}
		cs[i], ss[i], ids[i], senders[i], kinds[i], ats[i] = m.conv, m.seq, id, m.sender, m.kind, m.at
		bodies[i], vs[i], edits[i], dels[i], replies[i], reacts[i] = m.st.row()
	}
	bt.Queue(sqlInsertMessages, cs, ss, ids, senders, kinds, bodies, ats, vs, edits, dels, replies, reacts, ords, mentions, alls, cos, names, ims, atts)
	return nil
}

// joinIDs is ids as "1,2,3" (unnest cannot take an array of arrays of
// different lengths).
func joinIDs(ids []int64) string {
	b := make([]byte, 0, 8*len(ids))
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(b)
}

// queueInbox queues the INSERT of the numbered fan rows.
func queueInbox(bt *pgx.Batch, fan []fanRow) {
	n := len(fan)
	if n == 0 {
		return
	}
	us, is, cs, ss, vs := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	ks := make([]int16, n)
	ats := make([]time.Time, n)
	for i, f := range fan {
		us[i], is[i], cs[i], ks[i], ss[i], vs[i], ats[i] = f.user, f.inbox, f.conv, f.kind, f.seq, f.version, f.at
	}
	bt.Queue(sqlInsertInbox, us, is, cs, ks, ss, vs, ats)
}

// copyRows copies the messages and inbox rows of a large batch, then
// notifies.
func (t *txn) copyRows(ctx context.Context) error {
	b := t.b
	if len(b.msgs) > 0 {
		msgRows := make([][]any, len(b.msgs))
		for i, m := range b.msgs {
			id, err := uuid.Parse(m.msgID)
			if err != nil {
				return fmt.Errorf("msg id %q: %w", m.msgID, err)
			}
			body, v, edited, deleted, replyTo, reactions := m.st.row()
			var mentions []int64
			if len(m.mentions) > 0 {
				mentions = m.mentions
			}
			var name *string
			if m.senderName != "" {
				name = &m.senderName
			}
			atts, err := attachmentsJSON(m.st)
			if err != nil {
				return err
			}
			msgRows[i] = []any{m.conv, m.seq, id, m.sender, m.kind, body, m.at, v, edited, deleted, replyTo, reactions,
				m.ord, mentions, m.mentionAll, m.st.changedOrd, name, m.imported, atts}
		}
		if _, err := t.tx.CopyFrom(ctx, pgx.Identifier{"messages"},
			[]string{"conversation_id", "seq", "msg_id", "sender_id", "kind", "body", "created_at",
				"version", "edited_at", "deleted", "reply_to", "reactions", "ord", "mentions", "mention_all", "changed_ord",
				"sender_name", "imported", "attachments"}, pgx.CopyFromRows(msgRows)); err != nil {
			return fmt.Errorf("copy messages: %w", err)
		}
	}
	if len(b.fan) > 0 {
		if _, err := t.tx.CopyFrom(ctx, pgx.Identifier{"inbox"},
			[]string{"user_id", "inbox_seq", "conversation_id", "kind", "seq", "version", "created_at"},
			pgx.CopyFromSlice(len(b.fan), func(i int) ([]any, error) {
				f := &b.fan[i]
				return []any{f.user, f.inbox, f.conv, f.kind, f.seq, f.version, f.at}, nil
			})); err != nil {
			return fmt.Errorf("copy inbox: %w", err)
		}
	}
	nb := &pgx.Batch{}
	t.queueNotify(nb, false)
	if nb.Len() == 0 {
		return nil
	}
	if err := t.tx.SendBatch(ctx, nb).Close(); err != nil {
		return fmt.Errorf("notify %d users: %w", len(t.heads), err)
	}
	return nil
}

// queueNotify queues the notifications of the batch (package projection
// has the tokens): the new head of every user it touched, the seq of every
// message.sent it projected, the event ids of refused duplicates and the msg
// ids of rejections. They are delivered at commit.
//
// With announce (a small batch, its rows numbered), each user whose new
// entries are all messages also gets a run, so that a gateway can push them
// without reading them back.
func (t *txn) queueNotify(bt *pgx.Batch, announce bool) {
	b := t.b
	var enc projection.Encoder
	ids := make([]int64, 0, len(t.heads))
	for id := range t.heads {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		enc.Head(id, t.heads[id].inbox)
	}
	if announce && len(b.fan) > 0 {
		encodeRuns(&enc, b.fan)
	}
	for _, a := range b.acks {
		enc.Projected(a.eventID, a.seq)
	}
	for _, a := range b.changeAcks {
		enc.Projected(a.eventID, a.seq)
	}
	for _, id := range b.dups {
		enc.Duplicate(id)
	}
	for _, r := range b.rejects {
		if r.msgID != "" {
			enc.Rejected(r.msgID)
		}
	}
	for _, m := range b.changedInOrder() {
		enc.Updated(m.key.conv, m.key.seq, m.version)
	}
	for _, r := range b.receipts {
		enc.Read(r.Conv, r.User, r.Seq)
	}
	b.encodeLarge(&enc)
	for _, pl := range enc.Payloads() {
		bt.Queue(`SELECT pg_notify($1, $2)`, t.p.cfg.Channel, pl)
	}
}

// encodeRuns adds the run of every user whose numbered entries in fan are
// all messages, and not too many.
func encodeRuns(enc *projection.Encoder, fan []fanRow) {
	type run struct {
		projection.Run
		skip bool // a record entry, or too many: not announced
	}
	runs := map[int64]*run{}
	var order []int64
	for _, f := range fan {
		rn := runs[f.user]
		if rn == nil {
			rn = &run{Run: projection.Run{First: f.inbox}}
			runs[f.user] = rn
			order = append(order, f.user)
		}
		if f.kind != projection.KindMessage || len(rn.Keys) >= projection.MaxRunEntries {
			rn.skip = true
			continue
		}
		rn.Keys = append(rn.Keys, [2]int64{f.conv, f.seq})
	}
	for _, u := range order {
		if rn := runs[u]; !rn.skip {
			enc.Run(u, rn.Run)
		}
	}
}
