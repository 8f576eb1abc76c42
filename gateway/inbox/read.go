package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/gateway/internal/rows"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// Req is one "entries after N" read: up to Limit entries of User's inbox
// after After.
type Req struct {
	User, After int64
	Limit       int32
	// Counts asks for the user's unread and mention totals at the head
	// (Page.Counts), from the same snapshot; only a read of one user can.
	// Unless the head, epoch and large mark are KnownHead, KnownEpoch
	// and KnownLarge: then the totals are not counted again
	// (Page.CountsRead is false).
	Counts                bool
	KnownHead, KnownEpoch int64
	KnownLarge            string
}

// Page is what Read read for one Req: the epoch, the user's
// head, floor and record version, all from the snapshot of the entries.
type Page struct {
	Epoch, Head, Floor, RecordVersion int64
	Entries                           []Entry
	Counts                            protocol.Counts // when the Req asked
	CountsRead                        bool            // Counts were counted by this read
	// Large is the user's read-mode conversations (current member), read
	// with the counts (a Req that asks for Counts), from the same
	// snapshot; nil when none.
	Large []protocol.LargeConv
	// LargeJoined is, for each of Large, the seq the user's current
	// membership began at (what a push of its messages may show).
	LargeJoined []int64
	// LargeMark is a digest of Large (ids, last seqs and change counts),
	// from the same snapshot, "" when Large is empty: the part of the
	// totals' state that moves without the head (counts.go).
	LargeMark string
}

// Defaults of Config.
const (
	DefaultMessageCacheBytes = 256 << 20
	DefaultTooLongLag        = 500
)

// Config configures a Reader. The zero value of every field means its
// default.
type Config struct {
	// MessageCacheBytes bounds the memory of the message cache: the wire
	// form of messages read, reused for every page, frame and member that
	// carries them (messages never change). Negative disables it. Default
	// DefaultMessageCacheBytes (256 MiB).
	MessageCacheBytes int64

	// TooLongLag is the lag (head - after) above which Sync answers too
	// long instead of entries. Default DefaultTooLongLag (500,
	// docs/protocol.md).
	TooLongLag int64

	// Heads, when set, learns the heads that Sync reads (the hub's head
	// cache).
	Heads Heads

	// CountsCacheUsers bounds the users whose totals at their head are
	// remembered, so that a sync at the same head does not count them
	// again (counts.go). Negative disables it. Default
	// DefaultCountsCacheUsers (65,536).
	CountsCacheUsers int

	// CacheHit and CacheMiss count the message cache's lookups. Default:
	// not counted.
	CacheHit, CacheMiss func()
}

// Heads is what Sync teaches the heads it reads: Generation is taken
// before the read and handed to Learn after it (see hub.HeadCache).
type Heads interface {
	Generation() uint64
	Learn(gen uint64, user, epoch, head int64)
}

// Querier runs a query; a *pgxpool.Pool is one.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Reader reads users' inboxes: the entries after a cursor, for one user
// or many in one statement, with the messages from its cache. It is safe
// for concurrent use.
type Reader struct {
	db     Querier
	msgs   *msgCache // nil when disabled
	lag    int64
	heads  Heads
	counts *countsCache // nil when disabled
}

// New makes a reader that queries db.
func New(db Querier, cfg Config) *Reader {
	if cfg.MessageCacheBytes == 0 {
		cfg.MessageCacheBytes = DefaultMessageCacheBytes
	}
	if cfg.TooLongLag <= 0 {
		cfg.TooLongLag = DefaultTooLongLag
	}
	if cfg.CountsCacheUsers == 0 {
		cfg.CountsCacheUsers = DefaultCountsCacheUsers
	}
	if cfg.CacheHit == nil {
		cfg.CacheHit = func() {}
	}
	if cfg.CacheMiss == nil {
		cfg.CacheMiss = func() {}
	}
	return &Reader{db: db, msgs: newMsgCache(cfg.MessageCacheBytes, cfg.CacheHit, cfg.CacheMiss),
		lag: cfg.TooLongLag, heads: cfg.Heads, counts: newCountsCache(cfg.CountsCacheUsers)}
}

// CacheMessage puts the wire form of m, a message of epoch, in the message
// cache (a send's answer, which its members' pushes read next).
func (r *Reader) CacheMessage(epoch int64, m *protocol.Message) {
	if r.msgs != nil && len(m.Reactions) == 0 {
		r.msgs.put(msgKey{epoch: epoch, conv: m.ConversationID, seq: m.Seq}, m.CurrentVersion(), marshalWire(m))
	}
}

// Forget drops the cached copies of message (conv, seq), which changed to
// version (a u token of the notifications).
func (r *Reader) Forget(conv, seq, version int64) { r.msgs.forget(conv, seq, version) }

// ForgetAll drops every cached message: the notifications of changes may
// have been lost (the LISTEN connection dropped), or a replay renumbered.
func (r *Reader) ForgetAll() { r.msgs.clear() }

// CachedMessages counts the messages in the cache.
func (r *Reader) CachedMessages() int { return r.msgs.len() }

// sqlInboxFrom builds the key read over a source q(user_id, after, lim,
// ord): one row per request with the epoch, the user's head, floor and
// record version, and the entries' keys as four arrays (one row rather than
// one per entry: less work for PostgreSQL and for the decoding). The arrays
// aggregate an ordered subquery, which PostgreSQL keeps in order in
// practice; readOnce sorts them should that ever not hold. Entries are
// read only when the answer can carry them: after at or above the floor and
// head - after within the max lag ($4 in both forms).
func sqlInboxFrom(src string, counts bool) string {
	totals, totalsJoin := `NULL::bigint, NULL::bigint`, ``
	large := `, NULL::bigint[], NULL::bigint[], NULL::bigint[], NULL::bigint[], NULL::text`
	if counts {
		large = `, lg.ids, lg.seqs, lg.chg, lg.joined, lg.mark`
		totalsJoin = sqlLargeJoin
		// Known: the totals at this head, epoch and large list are the
		// caller's ($5, $6, $7): not counted again.
		const known = `COALESCE(u.inbox_seq, 0) = $5 AND (SELECT epoch FROM meta) = $6 AND lg.mark = $7`
		totals = `CASE WHEN ` + known + ` THEN NULL ELSE t.unread_total END,
	CASE WHEN ` + known + ` THEN NULL ELSE t.mention_total END`
		totalsJoin += `
LEFT JOIN LATERAL (` + projection.CountsSQL("q.user_id", "NOT ("+known+")") + `) t ON true`
	}
	return `SELECT q.ord, (SELECT epoch FROM meta), COALESCE(u.inbox_seq, 0), COALESCE(u.inbox_floor, 0),
	COALESCE(u.record_version, 0), e.seqs, e.convs, e.kinds, e.mseqs, e.vers, ` + totals + large + `
FROM ` + src + `
LEFT JOIN users u ON u.id = q.user_id` + totalsJoin + `
LEFT JOIN LATERAL (
	SELECT array_agg(x.inbox_seq) AS seqs, array_agg(x.conversation_id) AS convs,
		array_agg(x.kind) AS kinds, array_agg(x.seq) AS mseqs, array_agg(x.version) AS vers
	FROM (SELECT i.inbox_seq, i.conversation_id, i.kind, i.seq, i.version FROM inbox i
		WHERE i.user_id = q.user_id AND i.inbox_seq > q.after AND i.inbox_seq <= u.inbox_seq
			AND q.after >= u.inbox_floor AND u.inbox_seq - q.after <= $4
		ORDER BY i.inbox_seq LIMIT q.lim) x
) e ON true
ORDER BY q.ord`
}

// sqlLargeJoin reads the user's large list (docs/large-conversations.md):
// its current memberships of read-mode conversations, by id, as four
// arrays (the last one the joined_seq of each membership), and their mark:
// the md5 of every (id, last_seq, change_count), the empty string for an
// empty list (Page.LargeMark).
const sqlLargeJoin = `
LEFT JOIN LATERAL (
	SELECT array_agg(c.id ORDER BY c.id) AS ids, array_agg(c.last_seq ORDER BY c.id) AS seqs,
		array_agg(c.change_count ORDER BY c.id) AS chg, array_agg(s.joined_seq ORDER BY c.id) AS joined,
		COALESCE(md5(string_agg(c.id || ':' || c.last_seq || ':' || c.change_count, ';' ORDER BY c.id)), '') AS mark
	FROM member_spans s JOIN conversations c ON c.id = s.conversation_id AND c.read_fanout
	WHERE s.user_id = q.user_id AND s.left_seq IS NULL
) lg ON true`

// sqlInboxOne reads one user ($1 user, $2 after, $3 limit, $4 max lag);
// sqlInboxMany reads many ($1 users, $2 afters, $3 limits, $4 max lag).
// The scalar form keeps the planner's row estimate at one.
const inboxOneSrc = `(SELECT 1::bigint AS ord, $1::bigint AS user_id, $2::bigint AS after, $3::int AS lim) q`

var (
	sqlInboxOne       = sqlInboxFrom(inboxOneSrc, false)
	sqlInboxOneCounts = sqlInboxFrom(inboxOneSrc, true)
	sqlInboxMany      = sqlInboxFrom(`unnest($1::bigint[], $2::bigint[], $3::int[]) WITH ORDINALITY AS q(user_id, after, lim, ord)`, false)
)

// sqlMessagesByKey reads messages by (conversation, seq), with the epoch of
// the snapshot. $1 conversations, $2 seqs.
const sqlMessagesByKey = `SELECT (SELECT epoch FROM meta), ` + rows.MessageCols + `
FROM unnest($1::bigint[], $2::bigint[]) AS k(conversation_id, seq)
JOIN messages m ON m.conversation_id = k.conversation_id AND m.seq = k.seq`

// sqlRecordsByKey reads records by (user, conversation), with the epoch of
// the snapshot. $1 users, $2 conversations.
var sqlRecordsByKey = `SELECT (SELECT epoch FROM meta), k.user_id, ` + rows.RecordCols + `
FROM unnest($1::bigint[], $2::bigint[]) AS k(user_id, conversation_id)
JOIN records r ON r.user_id = k.user_id AND r.conversation_id = k.conversation_id` + rows.RecordJoins

// errEpochMoved says that a replay swapped the projections between the
// statements of one read; the read starts over.
var errEpochMoved = errors.New("the epoch changed during the read")

// Read answers reqs, in one statement for all of them plus one for the
// messages the cache lacks and one for records. maxLag bounds head - after for entries to be read
// (the too-long rule; the push passes no bound).
func (r *Reader) Read(ctx context.Context, reqs []Req, maxLag int64) ([]Page, error) {
	for attempt := 0; ; attempt++ {
		pages, err := r.readOnce(ctx, reqs, maxLag)
		if errors.Is(err, errEpochMoved) && attempt < 3 {
			continue
		}
		return pages, err
	}
}

// entryRef points back from a message or record to the entry that needs it.
type entryRef struct{ page, idx int }

// inboxRead is one readOnce in progress: the pages being filled and
// what their entries still need from a second statement.
type inboxRead struct {
	r       *Reader
	reqs    []Req
	pages   []Page
	misses  map[msgKey][]entryRef   // messages the cache lacks
	records map[[2]int64][]entryRef // records of record entries, by (user, conversation)
	epoch   int64                   // of the snapshot (the last row's)
	cols    [5][]int64              // a row's key arrays, reused
}

func (r *Reader) readOnce(ctx context.Context, reqs []Req, maxLag int64) ([]Page, error) {
	rs, err := r.query(ctx, reqs, maxLag)
	if err != nil {
		return nil, fmt.Errorf("read the inbox of %d users: %w", len(reqs), err)
	}
	rd := &inboxRead{r: r, reqs: reqs, pages: make([]Page, len(reqs))}
	for rs.Next() {
		if err := rd.row(rs.FieldDescriptions(), rs.RawValues()); err != nil {
			rs.Close()
			return nil, fmt.Errorf("read the inbox: %w", err)
		}
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read the inbox: %w", err)
	}
	if len(rd.misses) > 0 {
		if err := r.loadMessages(ctx, rd.epoch, rd.misses, rd.pages, func(page int) int64 { return reqs[page].User }); err != nil {
			return nil, err
		}
	}
	if len(rd.records) > 0 {
		if err := r.loadRecords(ctx, rd.epoch, rd.records, rd.pages); err != nil {
			return nil, err
		}
	}
	return rd.pages, nil
}

// queryInbox runs the key read: the scalar form for one request, the
// unnest form for many.
func (r *Reader) query(ctx context.Context, reqs []Req, maxLag int64) (pgx.Rows, error) {
	if len(reqs) == 1 {
		q := reqs[0]
		if q.Counts {
			return r.db.Query(ctx, sqlInboxOneCounts, q.User, q.After, q.Limit, maxLag, q.KnownHead, q.KnownEpoch, q.KnownLarge)
		}
		return r.db.Query(ctx, sqlInboxOne, q.User, q.After, q.Limit, maxLag)
	}
	users := make([]int64, len(reqs))
	afters := make([]int64, len(reqs))
	limits := make([]int32, len(reqs))
	for i, q := range reqs {
		users[i], afters[i], limits[i] = q.User, q.After, q.Limit
	}
	return r.db.Query(ctx, sqlInboxMany, users, afters, limits, maxLag)
}

// row decodes one row of the key read into its page: the scalars, then
// the four key arrays into entries.
func (rd *inboxRead) row(fds []pgconn.FieldDescription, raw [][]byte) error {
	var v [5]int64
	var null [5]bool
	if len(raw) != 17 {
		return fmt.Errorf("%d columns", len(raw))
	}
	if err := rawInts(fds[:5], raw[:5], v[:], null[:]); err != nil {
		return err
	}
	ord := v[0]
	if ord < 1 || ord > int64(len(rd.pages)) {
		return fmt.Errorf("ordinal %d out of range", ord)
	}
	p := &rd.pages[ord-1]
	p.Epoch, p.Head, p.Floor, p.RecordVersion = v[1], v[2], v[3], v[4]
	var totals [2]int64
	var noTotals [2]bool
	if err := rawInts(fds[10:12], raw[10:12], totals[:], noTotals[:]); err != nil {
		return err
	}
	p.Counts = protocol.Counts{UnreadTotal: totals[0], MentionTotal: totals[1]}
	p.CountsRead = !noTotals[0]
	if err := rd.large(fds[12:], raw[12:], p); err != nil {
		return err
	}
	rd.epoch = v[1]
	cols := &rd.cols
	for c := range cols {
		var err error
		if cols[c], err = rawIntArray(fds[5+c], raw[5+c], cols[c][:0]); err != nil {
			return err
		}
	}
	n := len(cols[0])
	if len(cols[1]) != n || len(cols[2]) != n || len(cols[3]) != n || len(cols[4]) != n {
		return fmt.Errorf("arrays of %d, %d, %d, %d, %d", n, len(cols[1]), len(cols[2]), len(cols[3]), len(cols[4]))
	}
	if n == 0 {
		return nil // nothing to read for this request
	}
	if !slices.IsSorted(cols[0]) {
		sortColumns(cols)
	}
	rd.entries(int(ord-1), p)
	return nil
}

// large decodes the four arrays of the large list into p.Large and
// p.LargeJoined.
func (rd *inboxRead) large(fds []pgconn.FieldDescription, raw [][]byte, p *Page) error {
	var cols [4][]int64
	for c := range cols {
		var err error
		if cols[c], err = rawIntArray(fds[c], raw[c], nil); err != nil {
			return err
		}
	}
	n := len(cols[0])
	if len(cols[1]) != n || len(cols[2]) != n || len(cols[3]) != n {
		return fmt.Errorf("large arrays of %d, %d, %d, %d", n, len(cols[1]), len(cols[2]), len(cols[3]))
	}
	p.Large, p.LargeJoined, p.LargeMark = nil, cols[3], string(raw[4])
	for i := range n {
		p.Large = append(p.Large, protocol.LargeConv{ConversationID: cols[0][i], LastSeq: cols[1][i], ChangeCount: cols[2][i]})
	}
	return nil
}

// entries fills p.Entries from the row's key arrays: a message from the
// cache, else it is noted as a miss; a record is noted for loadRecords.
func (rd *inboxRead) entries(page int, p *Page) {
	cols := &rd.cols
	n := len(cols[0])
	user := rd.reqs[page].User
	p.Entries = make([]Entry, n)
	for i := range n {
		e := &p.Entries[i]
		e.InboxSeq, e.ConversationID, e.kind = cols[0][i], cols[1][i], protocol.KindMessage
		ref := entryRef{page: page, idx: i}
		if cols[2][i] == projection.KindUpdate {
			e.kind = protocol.KindUpdate
		}
		if cols[2][i] == projection.KindRecord {
			e.kind = protocol.KindRecord
			if rd.records == nil {
				rd.records = map[[2]int64][]entryRef{}
			}
			k := [2]int64{user, e.ConversationID}
			rd.records[k] = append(rd.records[k], ref)
			continue
		}
		k := msgKey{epoch: rd.epoch, conv: e.ConversationID, seq: cols[3][i]}
		var minVersion int64 // an update entry needs a copy at least as new as its change
		if e.kind == protocol.KindUpdate {
			minVersion = cols[4][i]
		}
		if b, ok := rd.r.msgs.get(k, minVersion); ok {
			e.raw = b
			continue
		}
		if rd.misses == nil {
			rd.misses = map[msgKey][]entryRef{}
		}
		rd.misses[k] = append(rd.misses[k], ref)
	}
}

// sortColumns orders the five key arrays by the first (inbox_seq).
func sortColumns(cols *[5][]int64) {
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

// loadMessages reads the messages the cache lacked, caches their wire form
// and sets it on the entries that point at them. A message with reactions
// is not cached: each entry's reader gets its own reaction marked (userOf
// names the reader of a page).
func (r *Reader) loadMessages(ctx context.Context, epoch int64, misses map[msgKey][]entryRef, pages []Page, userOf func(page int) int64) error {
	convs := make([]int64, 0, len(misses))
	seqs := make([]int64, 0, len(misses))
	for k := range misses {
		convs, seqs = append(convs, k.conv), append(seqs, k.seq)
	}
	rs, err := r.db.Query(ctx, sqlMessagesByKey, convs, seqs)
	if err != nil {
		return fmt.Errorf("read %d messages: %w", len(convs), err)
	}
	defer rs.Close()
	var reacted map[msgKey]*protocol.Message
	for rs.Next() {
		var at int64
		var s rows.MessageScan
		if err := rs.Scan(append([]any{&at}, s.Targets()...)...); err != nil {
			return fmt.Errorf("read messages: %w", err)
		}
		if at != epoch {
			return errEpochMoved
		}
		m := s.Message()
		if m == nil {
			continue
		}
		k := msgKey{epoch: epoch, conv: m.ConversationID, seq: m.Seq}
		if len(m.Reactions) > 0 {
			if reacted == nil {
				reacted = map[msgKey]*protocol.Message{}
			}
			reacted[k] = m
			continue
		}
		b := marshalWire(m)
		r.msgs.put(k, m.CurrentVersion(), b)
		for _, ref := range misses[k] {
			pages[ref.page].Entries[ref.idx].raw = b
		}
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("read messages: %w", err)
	}
	rs.Close()
	if len(reacted) > 0 {
		return r.markMine(ctx, reacted, misses, pages, userOf)
	}
	return nil
}

// sqlMine reads the reactions of (user, conversation, seq) triples.
const sqlMine = `SELECT k.u, k.c, k.s, r.emoji
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS k(u, c, s)
JOIN reactions r ON r.conversation_id = k.c AND r.seq = k.s AND r.user_id = k.u`

// markMine sets the entries of messages with reactions, each with its
// reader's own reaction marked.
func (r *Reader) markMine(ctx context.Context, reacted map[msgKey]*protocol.Message, misses map[msgKey][]entryRef,
	pages []Page, userOf func(page int) int64) error {
	var us, cs, ss []int64
	seen := map[[3]int64]bool{}
	for k := range reacted {
		for _, ref := range misses[k] {
			t := [3]int64{userOf(ref.page), k.conv, k.seq}
			if !seen[t] {
				seen[t] = true
				us, cs, ss = append(us, t[0]), append(cs, t[1]), append(ss, t[2])
			}
		}
	}
	rs, err := r.db.Query(ctx, sqlMine, us, cs, ss)
	if err != nil {
		return fmt.Errorf("read the readers' reactions: %w", err)
	}
	mine := map[[3]int64]string{}
	for rs.Next() {
		var t [3]int64
		var emoji string
		if err := rs.Scan(&t[0], &t[1], &t[2], &emoji); err != nil {
			rs.Close()
			return fmt.Errorf("read the readers' reactions: %w", err)
		}
		mine[t] = emoji
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return fmt.Errorf("read the readers' reactions: %w", err)
	}
	for k, m := range reacted {
		wire := map[string][]byte{}
		for _, ref := range misses[k] {
			emoji := mine[[3]int64{userOf(ref.page), k.conv, k.seq}]
			b, ok := wire[emoji]
			if !ok {
				b = marshalWire(rows.SetMine(m, emoji))
				wire[emoji] = b
			}
			pages[ref.page].Entries[ref.idx].raw = b
		}
	}
	return nil
}

// loadRecords reads the records of record entries as they are now (the
// projections keep only the current state; versions only grow).
func (r *Reader) loadRecords(ctx context.Context, epoch int64, want map[[2]int64][]entryRef, pages []Page) error {
	users := make([]int64, 0, len(want))
	convs := make([]int64, 0, len(want))
	for k := range want {
		users, convs = append(users, k[0]), append(convs, k[1])
	}
	rs, err := r.db.Query(ctx, sqlRecordsByKey, users, convs)
	if err != nil {
		return fmt.Errorf("read %d records: %w", len(users), err)
	}
	defer rs.Close()
	for rs.Next() {
		var at, user int64
		var s rows.RecordScan
		if err := rs.Scan(append([]any{&at, &user}, s.Targets()...)...); err != nil {
			return fmt.Errorf("read records: %w", err)
		}
		if at != epoch {
			return errEpochMoved
		}
		r := s.Record()
		if r == nil {
			continue
		}
		b := marshalWire(r)
		for _, ref := range want[[2]int64{user, r.ConversationID}] {
			pages[ref.page].Entries[ref.idx].raw = b
		}
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("read records: %w", err)
	}
	return nil
}
