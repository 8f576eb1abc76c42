package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

// Config configures a Projector.
type Config struct {
	// Topic whose offsets this projector stores. Required.
	Topic string
	// Channel is the NOTIFY channel. Default projection.DefaultChannel.
	Channel string
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Projector applies batches of records. It is safe for concurrent use; each
// Apply is its own transaction.
type Projector struct {
	pool *pgxpool.Pool
	cfg  Config
	// Rows known to exist (committed by this projector's own transactions):
	// their INSERT ... ON CONFLICT DO NOTHING is skipped. Users and offset
	// rows are never deleted, and a replay's swap never happens under a
	// running fanout (it takes the fanout lock exclusively).
	knownMu    sync.Mutex
	knownUsers map[int64]struct{}
	knownParts map[int32]struct{}
}

// maxKnownUsers bounds knownUsers; past it the set starts over.
const maxKnownUsers = 1 << 20

// New returns a Projector writing through pool.
func New(cfg Config, pool *pgxpool.Pool) (*Projector, error) {
	if cfg.Topic == "" {
		return nil, errors.New("projector: Topic is required")
	}
	if cfg.Channel == "" {
		cfg.Channel = projection.DefaultChannel
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Projector{pool: pool, cfg: cfg}, nil
}

// Record is one log record. Event is nil for a record that could not be
// decoded (it was sent to the DLQ): it only moves the offset.
type Record struct {
	Partition int32
	Offset    int64
	Event     *events.Event
	// DeadLetter marks a decoded record that failed to project and was
	// sent to the DLQ: it is stored as a rejection with
	// projection.ReasonDeadLetter (so a waiting sender learns of it) and
	// takes no seq.
	DeadLetter bool
}

// Result counts what one Apply did.
type Result struct {
	Records   int // records at or above the stored offsets
	Skipped   int // records below the stored offsets (already applied)
	Messages  int // message rows written (system messages included)
	InboxRows int
	Rejected  int
	Users     int // users whose heads moved

	users []int64 // their ids (for Apply's memory of existing rows)
}

// Apply projects recs (in log order within each partition) in one
// transaction, skipping records already applied.
//
// The transaction's BEGIN travels in the pipeline of its first statements
// and, for a batch written with INSERTs, its COMMIT in the pipeline of its
// writes: a live batch is three round trips (offsets and state; users;
// writes and commit).
func (p *Projector) Apply(ctx context.Context, recs []Record) (Result, error) {
	c, err := p.pool.Acquire(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("acquire a connection: %w", err)
	}
	defer c.Release()
	conn := c.Conn()
	res, err := p.apply(ctx, conn, recs, true)
	if err == nil && conn.PgConn().TxStatus() != 'I' {
		// Returned before the writes (nothing new), or wrote with COPY.
		_, err = conn.Exec(ctx, "COMMIT")
	}
	if err == nil {
		p.remember(recs, res.users)
	}
	if err != nil {
		if conn.PgConn().TxStatus() != 'I' {
			if _, rbErr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
				// A connection in an unknown state is not reused.
				_ = conn.Close(context.WithoutCancel(ctx))
			}
		}
		return Result{}, err
	}
	return res, nil
}

// unknownParts returns the partitions whose offset rows may not exist yet
// (all of them unless own).
func (p *Projector) unknownParts(own bool, parts []int32) []int32 {
	return unknown(p, own, parts, func() map[int32]struct{} { return p.knownParts })
}

// unknownUsers returns, in order, the users whose rows may not exist yet.
func (p *Projector) unknownUsers(own bool, ids []int64) []int64 {
	return unknown(p, own, ids, func() map[int64]struct{} { return p.knownUsers })
}

// unknown returns the ids not in the set known() (read under knownMu), in
// order; all of them unless own.
func unknown[K comparable](p *Projector, own bool, ids []K, known func() map[K]struct{}) []K {
	if !own {
		return ids
	}
	p.knownMu.Lock()
	defer p.knownMu.Unlock()
	set := known()
	var out []K
	for _, id := range ids {
		if _, ok := set[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// remember records the rows a committed batch made sure of.
func (p *Projector) remember(recs []Record, users []int64) {
	p.knownMu.Lock()
	defer p.knownMu.Unlock()
	if p.knownParts == nil {
		p.knownParts, p.knownUsers = map[int32]struct{}{}, map[int64]struct{}{}
	}
	for _, r := range recs {
		p.knownParts[r.Partition] = struct{}{}
	}
	if len(p.knownUsers)+len(users) > maxKnownUsers {
		clear(p.knownUsers)
	}
	for _, u := range users {
		p.knownUsers[u] = struct{}{}
	}
}

// ApplyTx is Apply inside a transaction the caller owns (replay).
func (p *Projector) ApplyTx(ctx context.Context, tx pgx.Tx, recs []Record) (Result, error) {
	return p.apply(ctx, tx, recs, false)
}

// pipe is what a batch is written through: a transaction the caller owns,
// or a connection on which apply opens (and may commit) its own.
type pipe interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

const (
	sqlEnsureOffsets = `INSERT INTO consumer_offsets (topic, "partition", next_offset)
SELECT $1, p, 0 FROM unnest($2::int[]) AS p ORDER BY p ON CONFLICT DO NOTHING`
	sqlLockOffsets = `SELECT "partition", next_offset FROM consumer_offsets
WHERE topic = $1 AND "partition" = ANY($2::int[]) ORDER BY "partition" FOR UPDATE`
	sqlLockConversations = `SELECT id, last_seq FROM conversations WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE`
	sqlCurrentMembers    = `SELECT conversation_id, user_id FROM member_spans
WHERE conversation_id = ANY($1::bigint[]) AND left_seq IS NULL`
	sqlKnownMsgIDs = `SELECT msg_id::text FROM messages WHERE msg_id = ANY($1::uuid[])`
	sqlRecords     = `SELECT r.user_id, r.conversation_id, r.pinned, r.muted, r.read_seq, r.removed
FROM records r JOIN unnest($1::bigint[], $2::bigint[]) AS k(u, c) ON r.user_id = k.u AND r.conversation_id = k.c`
	sqlEnsureUsers = `INSERT INTO users (id) SELECT u FROM unnest($1::bigint[]) AS u ORDER BY u ON CONFLICT DO NOTHING`
	sqlLockUsers   = `SELECT id, inbox_seq, record_version FROM users WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE`

	sqlInsertConversations = `INSERT INTO conversations (id, title, created_by, created_at, last_seq, last_at)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::timestamptz[], $5::bigint[], $6::timestamptz[])
ON CONFLICT DO NOTHING`
	sqlUpdateConversations = `UPDATE conversations c SET last_seq = u.s, last_at = u.t
FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[]) AS u(id, s, t) WHERE c.id = u.id`
	sqlInsertSpans = `INSERT INTO member_spans (conversation_id, user_id, joined_seq, left_seq)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[])`
	sqlCloseSpans = `UPDATE member_spans m SET left_seq = u.l
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS u(c, usr, l)
WHERE m.conversation_id = u.c AND m.user_id = u.usr AND m.left_seq IS NULL`
	sqlUpsertRecords = `INSERT INTO records (user_id, conversation_id, pinned, muted, read_seq, version, removed)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bool[], $4::bool[], $5::bigint[], $6::bigint[], $7::bool[])
ON CONFLICT (user_id, conversation_id) DO UPDATE SET pinned = excluded.pinned, muted = excluded.muted,
read_seq = excluded.read_seq, version = excluded.version, removed = excluded.removed`
	sqlUpdateUsers = `UPDATE users SET inbox_seq = u.h, record_version = u.v
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS u(id, h, v) WHERE users.id = u.id`
	sqlInsertRejections = `INSERT INTO rejections (event_id, msg_id, event_type, conversation_id, actor_id, reason, topic, "partition", "offset", rejected_at)
SELECT e, m, t, c, a, r, $7, p, o, now() FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $8::int[], $9::bigint[]) AS u(e, m, t, c, a, r, p, o)
ON CONFLICT DO NOTHING`
	sqlUpdateOffsets = `UPDATE consumer_offsets o SET next_offset = u.n, updated_at = now()
FROM unnest($2::int[], $3::bigint[]) AS u(p, n) WHERE o.topic = $1 AND o."partition" = u.p`
)

type convState struct {
	id       int64
	exists   bool
	created  bool // created in this batch
	title    string
	by       int64
	at       time.Time
	lastSeq  int64
	lastAt   time.Time
	changed  bool
	members  map[int64]bool
	loadedAt int64 // last_seq as loaded
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
}

type fanRow struct {
	user, conv int64
	kind       int16
	seq        int64
	inbox      int64     // the inbox_seq write numbers it with
	version    int64     // the record version (kind record)
	rec        *recState // kind record
	at         time.Time
}

type msgRow struct {
	conv, seq int64
	msgID     string
	sender    int64
	kind      string
	body      string
	at        time.Time
}

type rejection struct {
	eventID, msgID, typ string
	conv, actor         int64
	reason              string
	partition           int32
	offset              int64
}

type batch struct {
	convs     map[int64]*convState
	records   map[recKey]*recState
	known     map[string]bool // msg ids already projected or seen in this batch
	msgs      []msgRow
	fan       []fanRow
	newSpans  []*span
	openNew   map[recKey]*span // spans opened in this batch and still open
	closes    []span           // closes of spans opened before this batch
	rejects   []rejection
	recsOrder []recKey
	acks      []ack    // message.sent events projected, for the senders' gateways
	dups      []string // event ids of message.sent events whose msg_id was taken
}

// ack is a message.sent event and the seq its message got.
type ack struct {
	eventID string
	seq     int64
}

// apply projects recs through tx; own says that apply begins the
// transaction (its first pipeline starts with BEGIN) and commits it in the
// pipeline of the writes when they are INSERTs.
func (p *Projector) apply(ctx context.Context, tx pipe, recs []Record, own bool) (Result, error) {
	var res Result
	if len(recs) == 0 {
		return res, nil
	}
	topic := p.cfg.Topic

	// 1. Offsets: lock, fence, and keep only what was not applied yet.
	parts := map[int32]int64{} // partition -> next offset after this batch
	for _, r := range recs {
		if r.Offset+1 > parts[r.Partition] {
			parts[r.Partition] = r.Offset + 1
		}
	}
	partIDs := make([]int32, 0, len(parts))
	for pt := range parts {
		partIDs = append(partIDs, pt)
	}
	sort.Slice(partIDs, func(i, j int) bool { return partIDs[i] < partIDs[j] })
	stored := map[int32]int64{}
	bt := &pgx.Batch{}
	if own {
		bt.Queue("BEGIN")
	}
	if ensure := p.unknownParts(own, partIDs); len(ensure) > 0 {
		bt.Queue(sqlEnsureOffsets, topic, ensure)
	}
	bt.Queue(sqlLockOffsets, topic, partIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var pt int32
			var next int64
			if err := rows.Scan(&pt, &next); err != nil {
				return err
			}
			stored[pt] = next
		}
		return rows.Err()
	})
	// The state the batch depends on is read in the same round trip, after
	// the offset locks (lock order: offsets, conversations, users), for
	// every record: those already applied only add a few rows.
	b := &batch{
		convs:   map[int64]*convState{},
		records: map[recKey]*recState{},
		known:   map[string]bool{},
		openNew: map[recKey]*span{},
	}
	p.queueLoad(bt, b, recs)
	if err := tx.SendBatch(ctx, bt).Close(); err != nil {
		return res, fmt.Errorf("lock offsets of %s and load the batch's state: %w", topic, err)
	}
	if len(stored) != len(partIDs) {
		p.forget()
		return res, &FencedError{Msg: fmt.Sprintf("lock offsets of %s: %d of %d partitions have a row", topic, len(stored), len(partIDs))}
	}
	live := make([]Record, 0, len(recs))
	for _, r := range recs {
		if r.Offset < stored[r.Partition] {
			res.Skipped++
			continue
		}
		live = append(live, r)
	}
	res.Records = len(live)
	if len(live) == 0 {
		return res, nil
	}

	for _, r := range live {
		switch {
		case r.Event == nil:
		case r.DeadLetter:
			b.reject(r, projection.ReasonDeadLetter)
		default:
			b.step(r)
		}
	}

	// Users: create, lock in id order, then assign inbox seqs and versions.
	heads, err := p.assign(ctx, tx, b, own)
	if err != nil {
		return res, err
	}
	if err := p.write(ctx, tx, b, heads, parts, stored, own); err != nil {
		return res, err
	}
	res.Messages = len(b.msgs)
	res.InboxRows = len(b.fan)
	res.Rejected = len(b.rejects)
	res.Users = len(heads)
	res.users = make([]int64, 0, len(heads))
	for id := range heads {
		res.users = append(res.users, id)
	}
	return res, nil
}

// queueLoad queues the reads and locks of the state the batch's events
// depend on.
func (p *Projector) queueLoad(bt *pgx.Batch, b *batch, live []Record) {
	convIDs := []int64{}
	var msgIDs []string
	recUsers, recConvs := []int64{}, []int64{}
	seenPair := map[recKey]bool{}
	wantRecord := func(u, c int64) {
		k := recKey{u, c}
		if !seenPair[k] {
			seenPair[k] = true
			recUsers = append(recUsers, u)
			recConvs = append(recConvs, c)
		}
	}
	for _, r := range live {
		e := r.Event
		if e == nil || r.DeadLetter {
			continue
		}
		if _, ok := b.convs[e.ConversationID]; !ok {
			b.convs[e.ConversationID] = &convState{id: e.ConversationID, members: map[int64]bool{}}
			convIDs = append(convIDs, e.ConversationID)
		}
		switch e.Type {
		case events.MessageSent:
			msgIDs = append(msgIDs, e.MsgID)
		case events.ConversationCreated, events.MemberAdded, events.MemberRemoved:
			msgIDs = append(msgIDs, e.EventID)
			if e.Type != events.ConversationCreated {
				wantRecord(e.UserID, e.ConversationID)
			}
		case events.RecordUpdated, events.ReadUpdated:
			wantRecord(e.ActorID, e.ConversationID)
		}
	}
	sort.Slice(convIDs, func(i, j int) bool { return convIDs[i] < convIDs[j] })
	// The conversation locks first (in id order), then the reads that
	// depend only on the batch.
	bt.Queue(sqlLockConversations, convIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id, last int64
			if err := rows.Scan(&id, &last); err != nil {
				return err
			}
			c := b.convs[id]
			c.exists, c.lastSeq, c.loadedAt = true, last, last
		}
		return rows.Err()
	})
	bt.Queue(sqlCurrentMembers, convIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c, u int64
			if err := rows.Scan(&c, &u); err != nil {
				return err
			}
			b.convs[c].members[u] = true
		}
		return rows.Err()
	})
	if len(msgIDs) > 0 {
		bt.Queue(sqlKnownMsgIDs, msgIDs).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return err
				}
				b.known[id] = true
			}
			return rows.Err()
		})
	}
	if len(recUsers) > 0 {
		bt.Queue(sqlRecords, recUsers, recConvs).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k recKey
				r := &recState{}
				if err := rows.Scan(&k.user, &k.conv, &r.pinned, &r.muted, &r.readSeq, &r.removed); err != nil {
					return err
				}
				b.records[k] = r
			}
			return rows.Err()
		})
	}
}

func systemBody(fields map[string]any) string {
	raw, _ := json.Marshal(fields)
	return string(raw)
}

// step applies one event to the in-memory state of the batch.
// reject refuses r's event for reason: a rejection row, no seq.
func (b *batch) reject(r Record, reason string) {
	e := r.Event
	if b.known["rej:"+e.EventID] {
		return // a duplicate record of an event already refused
	}
	b.known["rej:"+e.EventID] = true
	b.rejects = append(b.rejects, rejection{eventID: e.EventID, msgID: e.MsgID, typ: e.Type,
		conv: e.ConversationID, actor: e.ActorID, reason: reason, partition: r.Partition, offset: r.Offset})
}

func (b *batch) step(r Record) {
	e := r.Event
	c := b.convs[e.ConversationID]
	reject := func(reason string) { b.reject(r, reason) }
	switch e.Type {
	case events.ConversationCreated:
		if b.known[e.EventID] {
			return // duplicate record of the same event
		}
		if c.exists {
			reject(projection.ReasonExists)
			return
		}
		members := []int64{e.ActorID}
		seen := map[int64]bool{e.ActorID: true}
		for _, m := range e.Members {
			if !seen[m] {
				seen[m] = true
				members = append(members, m)
			}
		}
		c.exists, c.created, c.title, c.by, c.at = true, true, e.Title, e.ActorID, e.At
		for _, m := range members {
			c.members[m] = true
		}
		seq := b.message(c, e.EventID, e.ActorID, "system", systemBody(map[string]any{
			"event": events.ConversationCreated, "by": e.ActorID, "title": e.Title, "members": members}), e.At)
		for _, m := range members {
			b.openSpan(c.id, m, seq)
			b.record(m, c.id, e.At, func(rs *recState) { rs.removed = false })
		}
	case events.MemberAdded:
		if b.known[e.EventID] {
			return
		}
		if !c.exists {
			reject(projection.ReasonNoConversation)
			return
		}
		if !c.members[e.ActorID] {
			reject(projection.ReasonNotMember)
			return
		}
		if c.members[e.UserID] {
			return // already a member: nothing changes
		}
		c.members[e.UserID] = true
		seq := b.message(c, e.EventID, e.ActorID, "system", systemBody(map[string]any{
			"event": events.MemberAdded, "user_id": e.UserID, "by": e.ActorID}), e.At)
		b.openSpan(c.id, e.UserID, seq)
		b.record(e.UserID, c.id, e.At, func(rs *recState) { rs.removed = false })
	case events.MemberRemoved:
		if b.known[e.EventID] {
			return
		}
		if !c.exists {
			reject(projection.ReasonNoConversation)
			return
		}
		if !c.members[e.ActorID] {
			reject(projection.ReasonNotMember)
			return
		}
		if !c.members[e.UserID] {
			return // not a member: nothing changes
		}
		// The removed member receives its own removal, then leaves.
		seq := b.message(c, e.EventID, e.ActorID, "system", systemBody(map[string]any{
			"event": events.MemberRemoved, "user_id": e.UserID, "by": e.ActorID}), e.At)
		delete(c.members, e.UserID)
		b.closeSpan(c.id, e.UserID, seq)
		b.record(e.UserID, c.id, e.At, func(rs *recState) { rs.removed = true })
	case events.MessageSent:
		if b.known[e.MsgID] {
			b.dups = append(b.dups, e.EventID)
			return // I5: a msg_id is projected at most once
		}
		if !c.exists {
			reject(projection.ReasonNoConversation)
			return
		}
		if !c.members[e.ActorID] {
			reject(projection.ReasonNotMember)
			return
		}
		seq := b.message(c, e.MsgID, e.ActorID, "text", *e.Body, e.At)
		b.acks = append(b.acks, ack{eventID: e.EventID, seq: seq})
	case events.RecordUpdated:
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
	case events.ReadUpdated:
		if !c.exists || !c.members[e.ActorID] {
			return
		}
		read := min(*e.ReadSeq, c.lastSeq)
		if read <= b.current(e.ActorID, c.id).readSeq {
			return
		}
		b.record(e.ActorID, c.id, e.At, func(rs *recState) { rs.readSeq = read })
	}
}

// message appends a message to c and fans it out to the current members.
func (b *batch) message(c *convState, msgID string, sender int64, kind, body string, at time.Time) int64 {
	b.known[msgID] = true
	c.lastSeq++
	c.lastAt = at
	c.changed = true
	b.msgs = append(b.msgs, msgRow{conv: c.id, seq: c.lastSeq, msgID: msgID, sender: sender, kind: kind, body: body, at: at})
	for u := range c.members {
		b.fan = append(b.fan, fanRow{user: u, conv: c.id, kind: projection.KindMessage, seq: c.lastSeq, at: at})
	}
	return c.lastSeq
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
	s := &span{conv: conv, user: user, joined: seq}
	b.newSpans = append(b.newSpans, s)
	b.openNew[recKey{user, conv}] = s
}

func (b *batch) closeSpan(conv, user, seq int64) {
	k := recKey{user, conv}
	if s, ok := b.openNew[k]; ok {
		s.left = seq
		delete(b.openNew, k)
		return
	}
	b.closes = append(b.closes, span{conv: conv, user: user, left: seq})
}

type head struct{ inbox, version int64 }

// assign locks the users of the batch in id order and numbers their entries.
func (p *Projector) assign(ctx context.Context, tx pipe, b *batch, own bool) (map[int64]*head, error) {
	heads := map[int64]*head{}
	if len(b.fan) == 0 {
		return heads, nil
	}
	ids := make([]int64, 0)
	for _, f := range b.fan {
		if _, ok := heads[f.user]; !ok {
			heads[f.user] = &head{}
			ids = append(ids, f.user)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	bt := &pgx.Batch{}
	if ensure := p.unknownUsers(own, ids); len(ensure) > 0 {
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
			heads[id] = h
			locked++
		}
		return rows.Err()
	})
	if err := tx.SendBatch(ctx, bt).Close(); err != nil {
		return nil, fmt.Errorf("create and lock users: %w", err)
	}
	if locked != len(ids) {
		p.forget() // a row thought to exist does not: ensure them all next time
		return nil, fmt.Errorf("lock users: %d of %d have a row", locked, len(ids))
	}
	return heads, nil
}

// forget drops the memory of existing rows.
func (p *Projector) forget() {
	p.knownMu.Lock()
	p.knownParts, p.knownUsers = nil, nil
	p.knownMu.Unlock()
}

func (p *Projector) write(ctx context.Context, tx pipe, b *batch, heads map[int64]*head, parts map[int32]int64, stored map[int32]int64, own bool) error {
	// Number the inbox entries and record versions in batch order, which
	// keeps each conversation's entries ascending in every inbox (I4).
	for i := range b.fan {
		f := &b.fan[i]
		h := heads[f.user]
		h.inbox++
		f.inbox = h.inbox
		if f.kind == projection.KindRecord {
			h.version++
			f.version = h.version
			f.rec.version = f.version
		}
	}

	bt := &pgx.Batch{}
	var newIDs, newBy, updIDs, updSeq []int64
	var newTitles []string
	var newAt, newLastAt, updAt []time.Time
	var newLast []int64
	for _, c := range b.convs {
		switch {
		case c.created:
			newIDs, newTitles, newBy = append(newIDs, c.id), append(newTitles, c.title), append(newBy, c.by)
			newAt, newLast, newLastAt = append(newAt, c.at), append(newLast, c.lastSeq), append(newLastAt, c.lastAt)
		case c.changed:
			updIDs, updSeq, updAt = append(updIDs, c.id), append(updSeq, c.lastSeq), append(updAt, c.lastAt)
		}
	}
	if len(newIDs) > 0 {
		bt.Queue(sqlInsertConversations, newIDs, newTitles, newBy, newAt, newLast, newLastAt)
	}
	if len(updIDs) > 0 {
		bt.Queue(sqlUpdateConversations, updIDs, updSeq, updAt)
	}
	if len(b.closes) > 0 {
		cs, us, ls := make([]int64, len(b.closes)), make([]int64, len(b.closes)), make([]int64, len(b.closes))
		for i, s := range b.closes {
			cs[i], us[i], ls[i] = s.conv, s.user, s.left
		}
		bt.Queue(sqlCloseSpans, cs, us, ls)
	}
	if len(b.newSpans) > 0 {
		n := len(b.newSpans)
		cs, us, js, ls := make([]int64, n), make([]int64, n), make([]int64, n), make([]*int64, n)
		for i, s := range b.newSpans {
			cs[i], us[i], js[i] = s.conv, s.user, s.joined
			if s.left != 0 {
				l := s.left
				ls[i] = &l
			}
		}
		bt.Queue(sqlInsertSpans, cs, us, js, ls)
	}
	if n := len(b.recsOrder); n > 0 {
		us, cs, rs, vs := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		pins, mutes, rems := make([]bool, n), make([]bool, n), make([]bool, n)
		for i, k := range b.recsOrder {
			r := b.records[k]
			us[i], cs[i], rs[i], vs[i] = k.user, k.conv, r.readSeq, r.version
			pins[i], mutes[i], rems[i] = r.pinned, r.muted, r.removed
		}
		bt.Queue(sqlUpsertRecords, us, cs, pins, mutes, rs, vs, rems)
	}
	if n := len(heads); n > 0 {
		ids, hs, vs := make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		for id, h := range heads {
			ids, hs, vs = append(ids, id), append(hs, h.inbox), append(vs, h.version)
		}
		bt.Queue(sqlUpdateUsers, ids, hs, vs)
	}
	if n := len(b.rejects); n > 0 {
		es, ms, ts, rs := make([]string, n), make([]*string, n), make([]string, n), make([]string, n)
		cs, as, os := make([]int64, n), make([]int64, n), make([]int64, n)
		ps := make([]int32, n)
		for i, r := range b.rejects {
			es[i], ts[i], rs[i], cs[i], as[i], ps[i], os[i] = r.eventID, r.typ, r.reason, r.conv, r.actor, r.partition, r.offset
			if r.msgID != "" {
				m := r.msgID
				ms[i] = &m
			}
		}
		bt.Queue(sqlInsertRejections, es, ms, ts, cs, as, rs, p.cfg.Topic, ps, os)
	}
	{
		var ps []int32
		var ns []int64
		for pt, next := range parts {
			if next > stored[pt] {
				ps, ns = append(ps, pt), append(ns, next)
			}
		}
		bt.Queue(sqlUpdateOffsets, p.cfg.Topic, ps, ns)
	}
	// A small batch (the live case: a few messages) writes its rows and its
	// notifications in the same pipeline as the rest, one round trip; a
	// large one (catching up) copies its rows, which is faster in bulk.
	small := len(b.fan) <= smallWriteRows && len(b.msgs) <= smallWriteRows
	if small {
		if err := queueMessages(bt, b.msgs); err != nil {
			return err
		}
		if n := len(b.fan); n > 0 {
			us, is, cs, ss, vs := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
			ks := make([]int16, n)
			ats := make([]time.Time, n)
			for i, f := range b.fan {
				us[i], is[i], cs[i], ks[i], ss[i], vs[i], ats[i] = f.user, f.inbox, f.conv, f.kind, f.seq, f.version, f.at
			}
			bt.Queue(sqlInsertInbox, us, is, cs, ks, ss, vs, ats)
		}
		p.queueNotify(bt, b, heads, true)
		if own {
			bt.Queue("COMMIT")
		}
	}
	if err := tx.SendBatch(ctx, bt).Close(); err != nil {
		return fmt.Errorf("write projections: %w", err)
	}
	if small {
		return nil
	}

	if len(b.msgs) > 0 {
		msgRows := make([][]any, len(b.msgs))
		for i, m := range b.msgs {
			id, err := uuid.Parse(m.msgID)
			if err != nil {
				return fmt.Errorf("msg id %q: %w", m.msgID, err)
			}
			msgRows[i] = []any{m.conv, m.seq, id, m.sender, m.kind, m.body, m.at}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"messages"},
			[]string{"conversation_id", "seq", "msg_id", "sender_id", "kind", "body", "created_at"},
			pgx.CopyFromRows(msgRows)); err != nil {
			return fmt.Errorf("copy messages: %w", err)
		}
	}
	if len(b.fan) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"inbox"},
			[]string{"user_id", "inbox_seq", "conversation_id", "kind", "seq", "version", "created_at"},
			pgx.CopyFromSlice(len(b.fan), func(i int) ([]any, error) {
				f := &b.fan[i]
				return []any{f.user, f.inbox, f.conv, f.kind, f.seq, f.version, f.at}, nil
			})); err != nil {
			return fmt.Errorf("copy inbox: %w", err)
		}
	}
	nb := &pgx.Batch{}
	p.queueNotify(nb, b, heads, false)
	if nb.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, nb).Close(); err != nil {
		return fmt.Errorf("notify %d users: %w", len(heads), err)
	}
	return nil
}

// smallWriteRows is the most inbox rows (and messages) a batch writes with
// INSERTs in its pipeline rather than with COPY.
const smallWriteRows = 2000

const (
	sqlInsertMessages = `INSERT INTO messages (conversation_id, seq, msg_id, sender_id, kind, body, created_at)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::uuid[], $4::bigint[], $5::text[], $6::text[], $7::timestamptz[])`
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
	for i, m := range msgs {
		id, err := uuid.Parse(m.msgID)
		if err != nil {
			return fmt.Errorf("msg id %q: %w", m.msgID, err)
		}
		cs[i], ss[i], ids[i], senders[i], kinds[i], bodies[i], ats[i] = m.conv, m.seq, id, m.sender, m.kind, m.body, m.at
	}
	bt.Queue(sqlInsertMessages, cs, ss, ids, senders, kinds, bodies, ats)
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
func (p *Projector) queueNotify(bt *pgx.Batch, b *batch, heads map[int64]*head, announce bool) {
	var enc projection.Encoder
	ids := make([]int64, 0, len(heads))
	for id := range heads {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		enc.Head(id, heads[id].inbox)
	}
	if announce && len(b.fan) > 0 {
		type run struct {
			projection.Run
			skip bool // a record entry, or too many: not announced
		}
		runs := map[int64]*run{}
		var order []int64
		for _, f := range b.fan {
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
	for _, a := range b.acks {
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
	for _, pl := range enc.Payloads() {
		bt.Queue(`SELECT pg_notify($1, $2)`, p.cfg.Channel, pl)
	}
}
