package gateway

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// The read path of GET /v1/sync and of the WebSocket push. Inbox entries
// are read from PostgreSQL as bare keys (inbox_seq, conversation, kind,
// message seq) in one statement, and the messages they point at come from
// msgCache: a message never changes once committed (PROTOCOL.md has no
// edits), so its wire form is rendered once and reused by every page and
// frame that carries it, for every member. Only the messages the cache
// lacks, and the records of record entries (current state, rare), take a
// second statement.

// inboxReq is one "entries after N" read: up to limit entries of user's
// inbox after after.
type inboxReq struct {
	user, after int64
	limit       int32
}

// inboxPage is what readInbox read for one inboxReq: the epoch, the user's
// head, floor and record version, all from the snapshot of the entries.
type inboxPage struct {
	epoch, head, floor, recordVersion int64
	entries                           []entry
}

// sqlInboxFrom builds the key read over a source q(user_id, after, lim,
// ord): one row per request with the epoch, the user's head, floor and
// record version, and the entries' keys as four arrays (one row rather than
// one per entry: less work for PostgreSQL and for the decoding). The arrays
// aggregate an ordered subquery, which PostgreSQL keeps in order in
// practice; readInboxOnce sorts them should that ever not hold. Entries are
// read only when the answer can carry them: after at or above the floor and
// head - after within the max lag ($4 in both forms).
func sqlInboxFrom(src string) string {
	return `SELECT q.ord, (SELECT epoch FROM meta), COALESCE(u.inbox_seq, 0), COALESCE(u.inbox_floor, 0),
	COALESCE(u.record_version, 0), e.seqs, e.convs, e.kinds, e.mseqs
FROM ` + src + `
LEFT JOIN users u ON u.id = q.user_id
LEFT JOIN LATERAL (
	SELECT array_agg(x.inbox_seq) AS seqs, array_agg(x.conversation_id) AS convs,
		array_agg(x.kind) AS kinds, array_agg(x.seq) AS mseqs
	FROM (SELECT i.inbox_seq, i.conversation_id, i.kind, i.seq FROM inbox i
		WHERE i.user_id = q.user_id AND i.inbox_seq > q.after AND i.inbox_seq <= u.inbox_seq
			AND q.after >= u.inbox_floor AND u.inbox_seq - q.after <= $4
		ORDER BY i.inbox_seq LIMIT q.lim) x
) e ON true
ORDER BY q.ord`
}

// sqlInboxOne reads one user ($1 user, $2 after, $3 limit, $4 max lag);
// sqlInboxMany reads many ($1 users, $2 afters, $3 limits, $4 max lag).
// The scalar form keeps the planner's row estimate at one.
var (
	sqlInboxOne  = sqlInboxFrom(`(SELECT 1::bigint AS ord, $1::bigint AS user_id, $2::bigint AS after, $3::int AS lim) q`)
	sqlInboxMany = sqlInboxFrom(`unnest($1::bigint[], $2::bigint[], $3::int[]) WITH ORDINALITY AS q(user_id, after, lim, ord)`)
)

// sqlMessagesByKey reads messages by (conversation, seq), with the epoch of
// the snapshot. $1 conversations, $2 seqs.
const sqlMessagesByKey = `SELECT (SELECT epoch FROM meta), ` + sqlMessageCols + `
FROM unnest($1::bigint[], $2::bigint[]) AS k(conversation_id, seq)
JOIN messages m ON m.conversation_id = k.conversation_id AND m.seq = k.seq`

// sqlRecordsByKey reads records by (user, conversation), with the epoch of
// the snapshot. $1 users, $2 conversations.
const sqlRecordsByKey = `SELECT (SELECT epoch FROM meta), k.user_id, ` + sqlRecordCols + `
FROM unnest($1::bigint[], $2::bigint[]) AS k(user_id, conversation_id)
JOIN records r ON r.user_id = k.user_id AND r.conversation_id = k.conversation_id` + sqlRecordJoins

// errEpochMoved says that a replay swapped the projections between the
// statements of one read; the read starts over.
var errEpochMoved = errors.New("the epoch changed during the read")

// readInbox answers reqs. maxLag bounds head - after for entries to be read
// (the too-long rule; the push passes no bound).
func (g *Gateway) readInbox(ctx context.Context, reqs []inboxReq, maxLag int64) ([]inboxPage, error) {
	for attempt := 0; ; attempt++ {
		pages, err := g.readInboxOnce(ctx, reqs, maxLag)
		if errors.Is(err, errEpochMoved) && attempt < 3 {
			continue
		}
		return pages, err
	}
}

// entryRef points back from a message or record to the entry that needs it.
type entryRef struct {
	page, idx int
	user      int64
}

func (g *Gateway) readInboxOnce(ctx context.Context, reqs []inboxReq, maxLag int64) ([]inboxPage, error) {
	var rows pgx.Rows
	var err error
	if len(reqs) == 1 {
		rows, err = g.pool.Query(ctx, sqlInboxOne, reqs[0].user, reqs[0].after, reqs[0].limit, maxLag)
	} else {
		users := make([]int64, len(reqs))
		afters := make([]int64, len(reqs))
		limits := make([]int32, len(reqs))
		for i, r := range reqs {
			users[i], afters[i], limits[i] = r.user, r.after, r.limit
		}
		rows, err = g.pool.Query(ctx, sqlInboxMany, users, afters, limits, maxLag)
	}
	if err != nil {
		return nil, fmt.Errorf("read the inbox of %d users: %w", len(reqs), err)
	}
	pages := make([]inboxPage, len(reqs))
	var (
		misses  map[msgKey][]entryRef
		records map[[2]int64][]entryRef
		epoch   int64
	)
	var cols [4][]int64
	for rows.Next() {
		var v [5]int64
		var null [5]bool
		fds, raw := rows.FieldDescriptions(), rows.RawValues()
		if len(raw) != 9 {
			rows.Close()
			return nil, fmt.Errorf("read the inbox: %d columns", len(raw))
		}
		if err := rawInts(fds[:5], raw[:5], v[:], null[:]); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the inbox: %w", err)
		}
		ord := v[0]
		if ord < 1 || ord > int64(len(pages)) {
			rows.Close()
			return nil, fmt.Errorf("read the inbox: ordinal %d out of range", ord)
		}
		p := &pages[ord-1]
		p.epoch, p.head, p.floor, p.recordVersion = v[1], v[2], v[3], v[4]
		epoch = v[1]
		for c := range cols {
			if cols[c], err = rawIntArray(fds[5+c], raw[5+c], cols[c][:0]); err != nil {
				rows.Close()
				return nil, fmt.Errorf("read the inbox: %w", err)
			}
		}
		n := len(cols[0])
		if len(cols[1]) != n || len(cols[2]) != n || len(cols[3]) != n {
			rows.Close()
			return nil, fmt.Errorf("read the inbox: arrays of %d, %d, %d, %d", n, len(cols[1]), len(cols[2]), len(cols[3]))
		}
		if n == 0 {
			continue // nothing to read for this request
		}
		if !slices.IsSorted(cols[0]) {
			sortColumns(&cols)
		}
		user := reqs[ord-1].user
		p.entries = make([]entry, n)
		for i := range n {
			e := &p.entries[i]
			e.InboxSeq, e.ConversationID = cols[0][i], cols[1][i]
			ref := entryRef{page: int(ord - 1), idx: i, user: user}
			if cols[2][i] == projection.KindRecord {
				e.record = true
				if records == nil {
					records = map[[2]int64][]entryRef{}
				}
				k := [2]int64{user, e.ConversationID}
				records[k] = append(records[k], ref)
				continue
			}
			k := msgKey{epoch: epoch, conv: e.ConversationID, seq: cols[3][i]}
			if b, ok := g.msgs.get(k); ok {
				e.raw = b
				continue
			}
			if misses == nil {
				misses = map[msgKey][]entryRef{}
			}
			misses[k] = append(misses[k], ref)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the inbox: %w", err)
	}
	if len(misses) > 0 {
		if err := g.loadMessages(ctx, epoch, misses, pages); err != nil {
			return nil, err
		}
	}
	if len(records) > 0 {
		if err := g.loadRecords(ctx, epoch, records, pages); err != nil {
			return nil, err
		}
	}
	return pages, nil
}

// loadMessages reads the messages the cache lacked, caches their wire form
// and sets it on the entries that point at them.
func (g *Gateway) loadMessages(ctx context.Context, epoch int64, misses map[msgKey][]entryRef, pages []inboxPage) error {
	convs := make([]int64, 0, len(misses))
	seqs := make([]int64, 0, len(misses))
	for k := range misses {
		convs, seqs = append(convs, k.conv), append(seqs, k.seq)
	}
	rows, err := g.pool.Query(ctx, sqlMessagesByKey, convs, seqs)
	if err != nil {
		return fmt.Errorf("read %d messages: %w", len(convs), err)
	}
	defer rows.Close()
	for rows.Next() {
		var at int64
		var s msgScan
		if err := rows.Scan(append([]any{&at}, s.targets()...)...); err != nil {
			return fmt.Errorf("read messages: %w", err)
		}
		if at != epoch {
			return errEpochMoved
		}
		m := s.message()
		if m == nil {
			continue
		}
		k := msgKey{epoch: epoch, conv: m.ConversationID, seq: m.Seq}
		b := marshalWire(m)
		g.msgs.put(k, b)
		for _, ref := range misses[k] {
			pages[ref.page].entries[ref.idx].raw = b
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read messages: %w", err)
	}
	return nil
}

// loadRecords reads the records of record entries as they are now (the
// projections keep only the current state; versions only grow).
func (g *Gateway) loadRecords(ctx context.Context, epoch int64, want map[[2]int64][]entryRef, pages []inboxPage) error {
	users := make([]int64, 0, len(want))
	convs := make([]int64, 0, len(want))
	for k := range want {
		users, convs = append(users, k[0]), append(convs, k[1])
	}
	rows, err := g.pool.Query(ctx, sqlRecordsByKey, users, convs)
	if err != nil {
		return fmt.Errorf("read %d records: %w", len(users), err)
	}
	defer rows.Close()
	for rows.Next() {
		var at, user int64
		var s recScan
		if err := rows.Scan(append([]any{&at, &user}, s.targets()...)...); err != nil {
			return fmt.Errorf("read records: %w", err)
		}
		if at != epoch {
			return errEpochMoved
		}
		r := s.record()
		if r == nil {
			continue
		}
		b := marshalWire(r)
		for _, ref := range want[[2]int64{user, r.ConversationID}] {
			pages[ref.page].entries[ref.idx].raw = b
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read records: %w", err)
	}
	return nil
}

// marshalWire is the JSON of v as the API writes it (protocol.Marshal).
func marshalWire(v any) []byte {
	b, err := protocol.Marshal(v)
	if err != nil {
		panic("gateway: encode " + err.Error()) // only the protocol's types
	}
	return b
}

// rawInts decodes a row of integer columns (NULL allowed) without the
// reflection of Scan: binary int2/int4/int8, or text.
func rawInts(fds []pgconn.FieldDescription, raw [][]byte, v []int64, null []bool) error {
	if len(raw) != len(v) {
		return fmt.Errorf("%d columns, want %d", len(raw), len(v))
	}
	for i, b := range raw {
		if b == nil {
			v[i], null[i] = 0, true
			continue
		}
		null[i] = false
		if fds[i].Format == pgx.BinaryFormatCode {
			switch len(b) {
			case 2:
				v[i] = int64(int16(binary.BigEndian.Uint16(b)))
			case 4:
				v[i] = int64(int32(binary.BigEndian.Uint32(b)))
			case 8:
				v[i] = int64(binary.BigEndian.Uint64(b))
			default:
				return fmt.Errorf("column %s: %d bytes is no integer", fds[i].Name, len(b))
			}
			continue
		}
		n, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			return fmt.Errorf("column %s: %w", fds[i].Name, err)
		}
		v[i] = n
	}
	return nil
}

// sortColumns orders the four key arrays by the first (inbox_seq).
func sortColumns(cols *[4][]int64) {
	idx := make([]int, len(cols[0]))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(cols[0][a], cols[0][b]) })
	for c := range cols {
		sorted := make([]int64, len(idx))
		for i, j := range idx {
			sorted[i] = cols[c][j]
		}
		cols[c] = sorted
	}
}

// rawIntArray decodes a one-dimensional integer array without NULL
// elements (binary int2[]/int4[]/int8[], or text), appending to dst. A NULL
// array is empty.
func rawIntArray(fd pgconn.FieldDescription, b []byte, dst []int64) ([]int64, error) {
	if b == nil {
		return dst, nil
	}
	if fd.Format != pgx.BinaryFormatCode {
		s := string(b)
		if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
			return nil, fmt.Errorf("column %s: %q is no array", fd.Name, s)
		}
		if s = s[1 : len(s)-1]; s == "" {
			return dst, nil
		}
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("column %s: %w", fd.Name, err)
			}
			dst = append(dst, n)
		}
		return dst, nil
	}
	be := binary.BigEndian
	if len(b) < 12 {
		return nil, fmt.Errorf("column %s: short array", fd.Name)
	}
	ndim := be.Uint32(b)
	if ndim == 0 {
		return dst, nil
	}
	if ndim != 1 || len(b) < 20 {
		return nil, fmt.Errorf("column %s: array of %d dimensions", fd.Name, ndim)
	}
	n := int(be.Uint32(b[12:]))
	b = b[20:]
	for range n {
		if len(b) < 4 {
			return nil, fmt.Errorf("column %s: short array", fd.Name)
		}
		l := int(int32(be.Uint32(b)))
		b = b[4:]
		if l < 0 || len(b) < l {
			return nil, fmt.Errorf("column %s: NULL or short element", fd.Name)
		}
		switch l {
		case 2:
			dst = append(dst, int64(int16(be.Uint16(b))))
		case 4:
			dst = append(dst, int64(int32(be.Uint32(b))))
		case 8:
			dst = append(dst, int64(be.Uint64(b)))
		default:
			return nil, fmt.Errorf("column %s: %d-byte element", fd.Name, l)
		}
		b = b[l:]
	}
	return dst, nil
}

// The wire form of entries, written by hand (protocol.AppendEntry):
// encoding/json would reflect over every entry and re-validate every cached
// message.

// appendEntry appends e as a protocol.Entry.
func appendEntry(b []byte, e *entry) []byte {
	kind := protocol.KindMessage
	if e.record {
		kind = protocol.KindRecord
	}
	return protocol.AppendEntry(b, e.InboxSeq, e.ConversationID, kind, e.raw)
}

// appendEntries appends entries as a JSON array.
func appendEntries(b []byte, entries []entry) []byte {
	b = append(b, '[')
	for i := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendEntry(b, &entries[i])
	}
	return append(b, ']')
}

// MarshalJSON lets entries still go through encoding/json where speed does
// not matter.
func (e entry) MarshalJSON() ([]byte, error) { return appendEntry(nil, &e), nil }

// entriesSize estimates the encoded size of entries, to size buffers.
func entriesSize(entries []entry) int {
	n := 2
	for i := range entries {
		n += 72 + len(entries[i].raw)
	}
	return n
}

// msgKey identifies a message within one epoch (a replay may renumber).
type msgKey struct{ epoch, conv, seq int64 }

const msgCacheShards = 64

// msgCache holds the wire form of messages, bounded by bytes. It is kept
// per conversation: a conversation's messages are numbered densely, so they
// sit in a slice indexed by seq, and a lookup is one access to a small map
// of conversations plus an index (a map of every message was a memory miss
// or two per entry, 16% of the gateway's CPU on sync pages). When a shard
// is over its share of the budget it evicts whole conversations, the ones
// not read since the last eviction pass first (a clock). A nil *msgCache
// caches nothing.
type msgCache struct {
	shards      [msgCacheShards]msgShard
	shardBudget int
	hits        func()
	missesFn    func()
}

type msgShard struct {
	mu    sync.Mutex
	convs map[convKey]*convMsgs
	bytes int
}

type convKey struct{ epoch, conv int64 }

// convMsgs is a window of one conversation's messages: msgs[i] is seq
// base+i (nil when not cached).
type convMsgs struct {
	base  int64
	msgs  [][]byte
	bytes int  // the messages' bytes plus the slots
	hot   bool // read since the last eviction pass
}

// msgOverhead approximates the bytes a cached message costs beyond its JSON
// (its slot and allocation rounding).
const msgOverhead = 40

// maxWindow bounds a conversation's window of slots: a message further
// from the window than this starts a new one.
const maxWindow = 4096

func newMsgCache(budget int64, hit, miss func()) *msgCache {
	if budget <= 0 {
		return nil
	}
	c := &msgCache{shardBudget: int(max(budget/msgCacheShards, 1)), hits: hit, missesFn: miss}
	for i := range c.shards {
		c.shards[i].convs = map[convKey]*convMsgs{}
	}
	return c
}

func (c *msgCache) shard(conv int64) *msgShard {
	return &c.shards[(uint64(conv)*0x9E3779B97F4A7C15>>32)%msgCacheShards]
}

func (c *msgCache) get(k msgKey) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	sh := c.shard(k.conv)
	sh.mu.Lock()
	var b []byte
	if cm := sh.convs[convKey{k.epoch, k.conv}]; cm != nil {
		if i := k.seq - cm.base; i >= 0 && i < int64(len(cm.msgs)) {
			b = cm.msgs[i]
		}
		cm.hot = true
	}
	sh.mu.Unlock()
	if b != nil {
		c.hits()
		return b, true
	}
	c.missesFn()
	return nil, false
}

func (c *msgCache) put(k msgKey, b []byte) {
	if c == nil || b == nil {
		return
	}
	sh := c.shard(k.conv)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ck := convKey{k.epoch, k.conv}
	cm := sh.convs[ck]
	if cm == nil {
		cm = &convMsgs{base: k.seq}
		sh.convs[ck] = cm
	}
	i := k.seq - cm.base
	switch {
	case i >= 0 && i < int64(len(cm.msgs)):
		if cm.msgs[i] != nil {
			return
		}
	case i >= int64(len(cm.msgs)) && i < maxWindow:
		sh.bytes -= cm.bytes
		cm.bytes += int(i+1-int64(len(cm.msgs))) * msgOverhead
		sh.bytes += cm.bytes
		cm.msgs = append(cm.msgs, make([][]byte, i+1-int64(len(cm.msgs)))...)
	case i < 0 && int64(len(cm.msgs))-i <= maxWindow:
		grown := make([][]byte, int64(len(cm.msgs))-i)
		copy(grown[-i:], cm.msgs)
		sh.bytes -= cm.bytes
		cm.bytes += int(-i) * msgOverhead
		sh.bytes += cm.bytes
		cm.msgs, cm.base, i = grown, k.seq, 0
	default: // too far from the window: start a new one at this message
		sh.bytes -= cm.bytes
		cm.msgs, cm.base, cm.bytes, i = make([][]byte, 1), k.seq, msgOverhead, 0
		sh.bytes += cm.bytes
	}
	cm.msgs[i] = b
	cm.bytes += len(b)
	sh.bytes += len(b)
	cm.hot = true
	if sh.bytes > c.shardBudget {
		sh.evictLocked(c.shardBudget, ck)
	}
}

// evictLocked drops conversations until the shard is within budget: those
// not read since the last pass first (the pass clears the marks), keeping
// the one just written.
func (sh *msgShard) evictLocked(budget int, keep convKey) {
	for pass := 0; pass < 2 && sh.bytes > budget; pass++ {
		for k, cm := range sh.convs {
			if sh.bytes <= budget*3/4 {
				return
			}
			if k == keep {
				continue
			}
			if cm.hot && pass == 0 {
				cm.hot = false
				continue
			}
			sh.bytes -= cm.bytes
			delete(sh.convs, k)
		}
	}
}

// len counts the cached messages (tests).
func (c *msgCache) len() int {
	if c == nil {
		return 0
	}
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for _, cm := range sh.convs {
			for _, b := range cm.msgs {
				if b != nil {
					n++
				}
			}
		}
		sh.mu.Unlock()
	}
	return n
}
