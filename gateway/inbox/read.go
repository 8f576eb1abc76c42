package inbox

import (
	"cmp"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"

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
	// HeldBack counts the entries a read on several servers held back:
	// an entry whose message or record its conversation's server does not
	// show (a reader of an older placement during a move) ends its page
	// before it, so that the client asks again. Default: not counted.
	HeldBack func(n int)
}

// Heads is what Sync teaches the heads it reads: Generation is taken
// before the read and handed to Learn after it (see hub.HeadCache; the
// user names the cache of its server, hub.UserHeads).
type Heads interface {
	Generation(user int64) uint64
	Learn(gen uint64, user, epoch, head int64)
}

// Querier runs a query; a *pgxpool.Pool is one.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Servers is a sharded placement as the reader sees it: a Querier per
// PostgreSQL server and the server (an index in DBs) of a user's state and
// of a conversation's (docs/decisions.md, "Placement of state on several
// PostgreSQL servers"). A user's entries, head, floor, epoch and records
// are read on its server; the messages, reactions, conversation data of
// records, and the read-mode lists on the conversations' servers; the
// totals and large lists are summed over every server, each counting its
// own conversations from the copies of the members' records it keeps.
type Servers struct {
	DBs            []Querier
	OfUser         func(user int64) int
	OfConversation func(conv int64) int
}

// Reader reads users' inboxes: the entries after a cursor, for one user
// or many in one statement, with the messages from its cache. It is safe
// for concurrent use.
type Reader struct {
	dbs    []Querier
	ofUser func(int64) int
	ofConv func(int64) int
	// known is the epoch last read on each server: the key of the cached
	// messages of a conversation whose server a read did not ask for its
	// epoch (0 until one read has).
	known  []atomic.Int64
	msgs   *msgCache // nil when disabled
	lag    int64
	heads  Heads
	counts *countsCache // nil when disabled
	// heldBack is Config.HeldBack.
	heldBack func(n int)
}

// New makes a reader that queries db, the one server.
func New(db Querier, cfg Config) *Reader {
	return NewSharded(Servers{DBs: []Querier{db}}, cfg)
}

// NewSharded makes a reader of a placement over several servers; with one
// server it is New.
func NewSharded(s Servers, cfg Config) *Reader {
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
	if cfg.HeldBack == nil {
		cfg.HeldBack = func(int) {}
	}
	r := &Reader{dbs: s.DBs, ofUser: s.OfUser, ofConv: s.OfConversation, known: make([]atomic.Int64, len(s.DBs)), heldBack: cfg.HeldBack,
		msgs: newMsgCache(cfg.MessageCacheBytes, cfg.CacheHit, cfg.CacheMiss),
		lag:  cfg.TooLongLag, heads: cfg.Heads, counts: newCountsCache(cfg.CountsCacheUsers)}
	if len(s.DBs) == 1 {
		r.ofUser, r.ofConv = func(int64) int { return 0 }, func(int64) int { return 0 }
	} else if r.ofUser == nil || r.ofConv == nil {
		panic("inbox: several servers without OfUser and OfConversation")
	}
	return r
}

// sharded reports whether the reader spans several servers.
func (r *Reader) sharded() bool { return len(r.dbs) > 1 }

// userDB is the server of user's state; convDB of conv's.
func (r *Reader) userDB(user int64) Querier { return r.dbs[r.ofUser(user)] }
func (r *Reader) convDB(conv int64) Querier { return r.dbs[r.ofConv(conv)] }

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

// sqlElsewhere reads, on a server other than the user's, the part of the
// user's totals and large list that its conversations hold (the copies of
// the user's records there, its spans). $1 user.
var sqlElsewhere = `SELECT t.unread_total, t.mention_total, lg.ids, lg.seqs, lg.chg, lg.joined
FROM (SELECT $1::bigint AS user_id) q` + sqlLargeJoin + `
LEFT JOIN LATERAL (` + projection.CountsSQL("q.user_id", "") + `) t ON true`

// errEpochMoved says that a replay swapped the projections between the
// statements of one read; the read starts over.
var errEpochMoved = errors.New("the epoch changed during the read")

// Read answers reqs, in one statement for all of them plus one for the
// messages the cache lacks and one for records. maxLag bounds head - after for entries to be read
// (the too-long rule; the push passes no bound). On several servers it is
// one statement per server of the users, and the messages and records are
// read on their conversations' servers.
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
	// epochs is each server's epoch as this read sees it: its key read's
	// (read), else the last known when the read began (lent: a message
	// was keyed with it; a key read after that finds another one is a
	// replay of that server between the two, and the read starts over).
	epochs     []int64
	read, lent []bool
	moved      bool
	index      []int      // the page of each ordinal of the key read being decoded; nil: ordinal - 1
	server     int        // of the key read being decoded
	cols       [5][]int64 // a row's key arrays, reused
}

func (r *Reader) readOnce(ctx context.Context, reqs []Req, maxLag int64) ([]Page, error) {
	n := len(r.dbs)
	rd := &inboxRead{r: r, reqs: reqs, pages: make([]Page, len(reqs)),
		epochs: make([]int64, n), read: make([]bool, n), lent: make([]bool, n)}
	for s := range r.known {
		rd.epochs[s] = r.known[s].Load()
	}
	if !r.sharded() {
		if err := rd.keys(ctx, 0, reqs, nil, maxLag); err != nil {
			return nil, err
		}
	} else {
		byServer := make([][]int, n)
		for i, q := range reqs {
			s := r.ofUser(q.User)
			byServer[s] = append(byServer[s], i)
		}
		for s, idx := range byServer {
			if len(idx) == 0 {
				continue
			}
			sub := make([]Req, len(idx))
			for j, i := range idx {
				sub[j] = reqs[i]
				// The totals are summed over the servers (elsewhere):
				// counted every time, not gated by one server's state.
				sub[j].KnownHead = -1
			}
			if err := rd.keys(ctx, s, sub, idx, maxLag); err != nil {
				return nil, err
			}
		}
		if rd.moved {
			return nil, errEpochMoved
		}
		if err := rd.elsewhere(ctx); err != nil {
			return nil, err
		}
	}
	if len(rd.misses) > 0 {
		if err := r.loadMessages(ctx, rd.misses, rd.pages, func(page int) int64 { return reqs[page].User }); err != nil {
			return nil, err
		}
	}
	if len(rd.records) > 0 {
		if err := rd.loadRecords(ctx); err != nil {
			return nil, err
		}
	}
	if r.sharded() {
		if n := holdBack(rd.pages); n > 0 {
			r.heldBack(n)
		}
	}
	return rd.pages, nil
}

// holdBack ends each page before its first entry that has no message or
// record: on several servers, one its conversation's server does not show
// (this reader's placement is older than a move's switch); the page's
// has_more makes the client ask again. On one server an entry always has
// its message, written in the same transaction. It returns the pages cut.
func holdBack(pages []Page) int {
	n := 0
	for i := range pages {
		for j, e := range pages[i].Entries {
			if e.raw == nil {
				pages[i].Entries = pages[i].Entries[:j]
				n++
				break
			}
		}
	}
	return n
}

// keys runs the key read of reqs on server s and decodes it; index maps
// its ordinals to pages (nil: reqs are all of them).
func (rd *inboxRead) keys(ctx context.Context, s int, reqs []Req, index []int, maxLag int64) error {
	rs, err := rd.r.query(ctx, rd.r.dbs[s], reqs, maxLag)
	if err != nil {
		return fmt.Errorf("read the inbox of %d users: %w", len(reqs), err)
	}
	rd.index, rd.server = index, s
	for rs.Next() {
		if err := rd.row(rs.FieldDescriptions(), rs.RawValues(), len(reqs)); err != nil {
			rs.Close()
			return fmt.Errorf("read the inbox: %w", err)
		}
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return fmt.Errorf("read the inbox: %w", err)
	}
	return nil
}

// queryInbox runs the key read on db: the scalar form for one request, the
// unnest form for many.
func (r *Reader) query(ctx context.Context, db Querier, reqs []Req, maxLag int64) (pgx.Rows, error) {
	if len(reqs) == 1 {
		q := reqs[0]
		if q.Counts {
			return db.Query(ctx, sqlInboxOneCounts, q.User, q.After, q.Limit, maxLag, q.KnownHead, q.KnownEpoch, q.KnownLarge)
		}
		return db.Query(ctx, sqlInboxOne, q.User, q.After, q.Limit, maxLag)
	}
	users := make([]int64, len(reqs))
	afters := make([]int64, len(reqs))
	limits := make([]int32, len(reqs))
	for i, q := range reqs {
		users[i], afters[i], limits[i] = q.User, q.After, q.Limit
	}
	return db.Query(ctx, sqlInboxMany, users, afters, limits, maxLag)
}

// row decodes one row of the key read (of n requests) into its page: the
// scalars, then the four key arrays into entries.
func (rd *inboxRead) row(fds []pgconn.FieldDescription, raw [][]byte, n int) error {
	var v [5]int64
	var null [5]bool
	if len(raw) != 17 {
		return fmt.Errorf("%d columns", len(raw))
	}
	if err := rawInts(fds[:5], raw[:5], v[:], null[:]); err != nil {
		return err
	}
	ord := v[0]
	if ord < 1 || ord > int64(n) {
		return fmt.Errorf("ordinal %d out of range", ord)
	}
	page := int(ord - 1)
	if rd.index != nil {
		page = rd.index[page]
	}
	p := &rd.pages[page]
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
	rd.learnEpoch(rd.server, v[1])
	cols := &rd.cols
	for c := range cols {
		var err error
		if cols[c], err = rawIntArray(fds[5+c], raw[5+c], cols[c][:0]); err != nil {
			return err
		}
	}
	k := len(cols[0])
	if len(cols[1]) != k || len(cols[2]) != k || len(cols[3]) != k || len(cols[4]) != k {
		return fmt.Errorf("arrays of %d, %d, %d, %d, %d", k, len(cols[1]), len(cols[2]), len(cols[3]), len(cols[4]))
	}
	if k == 0 {
		return nil // nothing to read for this request
	}
	if !slices.IsSorted(cols[0]) {
		sortColumns(cols)
	}
	rd.entries(page, p)
	return nil
}

// learnEpoch takes epoch as server s's for the rest of the read.
func (rd *inboxRead) learnEpoch(s int, epoch int64) {
	if rd.read[s] && rd.epochs[s] == epoch {
		return
	}
	if rd.lent[s] && rd.epochs[s] != epoch {
		rd.moved = true
	}
	rd.epochs[s], rd.read[s] = epoch, true
	rd.r.known[s].Store(epoch)
}

// convEpoch is the epoch a message of conv is keyed with in this read:
// its server's.
func (rd *inboxRead) convEpoch(conv int64) int64 {
	s := rd.r.ofConv(conv)
	if !rd.read[s] {
		rd.lent[s] = true
	}
	return rd.epochs[s]
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

// elsewhere adds to the pages that asked for counts what the servers other
// than their user's hold: the totals of their conversations and their
// read-mode memberships, merged by id into the large list, whose mark is
// then the digest of the whole list (as one server computes it).
func (rd *inboxRead) elsewhere(ctx context.Context) error {
	for i, q := range rd.reqs {
		if !q.Counts {
			continue
		}
		p := &rd.pages[i]
		us := rd.r.ofUser(q.User)
		for s, db := range rd.r.dbs {
			if s == us {
				continue
			}
			var unread, mentions *int64
			var ids, seqs, chg, joined []int64
			rs, err := db.Query(ctx, sqlElsewhere, q.User)
			if err == nil {
				_, err = pgx.ForEachRow(rs, []any{&unread, &mentions, &ids, &seqs, &chg, &joined}, func() error { return nil })
			}
			if err != nil {
				return fmt.Errorf("read user %d's totals on server %d: %w", q.User, s+1, err)
			}
			if unread != nil {
				p.Counts.UnreadTotal += *unread
			}
			if mentions != nil {
				p.Counts.MentionTotal += *mentions
			}
			if len(ids) != len(seqs) || len(ids) != len(chg) || len(ids) != len(joined) {
				return fmt.Errorf("large arrays of %d, %d, %d, %d", len(ids), len(seqs), len(chg), len(joined))
			}
			for j := range ids {
				p.Large = append(p.Large, protocol.LargeConv{ConversationID: ids[j], LastSeq: seqs[j], ChangeCount: chg[j]})
				p.LargeJoined = append(p.LargeJoined, joined[j])
			}
		}
		sortLarge(p)
		p.LargeMark = largeMark(p.Large)
	}
	return nil
}

// sortLarge orders p's large list (and its joined seqs) by id.
func sortLarge(p *Page) {
	idx := make([]int, len(p.Large))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(p.Large[a].ConversationID, p.Large[b].ConversationID) })
	large, joined := make([]protocol.LargeConv, len(idx)), make([]int64, len(idx))
	for i, j := range idx {
		large[i], joined[i] = p.Large[j], p.LargeJoined[j]
	}
	if len(idx) == 0 {
		large, joined = nil, nil
	}
	p.Large, p.LargeJoined = large, joined
}

// largeMark is sqlLargeJoin's mark of a large list ordered by id: the md5
// of every id:last_seq:change_count joined by ";", "" for none.
func largeMark(large []protocol.LargeConv) string {
	if len(large) == 0 {
		return ""
	}
	var b []byte
	for i, c := range large {
		if i > 0 {
			b = append(b, ';')
		}
		b = strconv.AppendInt(b, c.ConversationID, 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, c.LastSeq, 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, c.ChangeCount, 10)
	}
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
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
		k := msgKey{epoch: rd.convEpoch(e.ConversationID), conv: e.ConversationID, seq: cols[3][i]}
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

// loadMessages reads the messages the cache lacked, on their
// conversations' servers, caches their wire form and sets it on the
// entries that point at them. A miss keyed with epoch 0 (its server's
// epoch not known yet) takes the epoch read; one keyed with another epoch
// than the one read is of a replay since (errEpochMoved). A message with
// reactions is not cached: each entry's reader gets its own reaction
// marked (userOf names the reader of a page).
func (r *Reader) loadMessages(ctx context.Context, misses map[msgKey][]entryRef, pages []Page, userOf func(page int) int64) error {
	type group struct{ convs, seqs []int64 }
	groups := map[[2]int64]*group{} // by (server, epoch)
	for k := range misses {
		gk := [2]int64{int64(r.ofConv(k.conv)), k.epoch}
		g := groups[gk]
		if g == nil {
			g = &group{}
			groups[gk] = g
		}
		g.convs, g.seqs = append(g.convs, k.conv), append(g.seqs, k.seq)
	}
	var reacted map[msgKey]*protocol.Message
	for gk, g := range groups {
		server, want := int(gk[0]), gk[1]
		if err := r.loadGroup(ctx, server, want, g.convs, g.seqs, misses, pages, &reacted); err != nil {
			return err
		}
	}
	if len(reacted) > 0 {
		return r.markMine(ctx, reacted, misses, pages, userOf)
	}
	return nil
}

// loadGroup reads the messages (convs, seqs) of server, keyed with epoch
// want in misses.
func (r *Reader) loadGroup(ctx context.Context, server int, want int64, convs, seqs []int64,
	misses map[msgKey][]entryRef, pages []Page, reacted *map[msgKey]*protocol.Message) error {
	rs, err := r.dbs[server].Query(ctx, sqlMessagesByKey, convs, seqs)
	if err != nil {
		return fmt.Errorf("read %d messages: %w", len(convs), err)
	}
	defer rs.Close()
	for rs.Next() {
		var at int64
		var ms rows.MessageScan
		if err := rs.Scan(append([]any{&at}, ms.Targets()...)...); err != nil {
			return fmt.Errorf("read messages: %w", err)
		}
		if want != 0 && at != want {
			r.known[server].Store(at)
			return errEpochMoved
		}
		if want == 0 {
			r.known[server].CompareAndSwap(0, at)
		}
		m := ms.Message()
		if m == nil {
			continue
		}
		k := msgKey{epoch: want, conv: m.ConversationID, seq: m.Seq}
		if len(m.Reactions) > 0 {
			if *reacted == nil {
				*reacted = map[msgKey]*protocol.Message{}
			}
			(*reacted)[k] = m
			continue
		}
		b := marshalWire(m)
		r.msgs.put(msgKey{epoch: at, conv: m.ConversationID, seq: m.Seq}, m.CurrentVersion(), b)
		for _, ref := range misses[k] {
			pages[ref.page].Entries[ref.idx].raw = b
		}
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("read messages: %w", err)
	}
	return nil
}

// sqlMine reads the reactions of (user, conversation, seq) triples.
const sqlMine = `SELECT k.u, k.c, k.s, r.emoji
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS k(u, c, s)
JOIN reactions r ON r.conversation_id = k.c AND r.seq = k.s AND r.user_id = k.u`

// markMine sets the entries of messages with reactions, each with its
// reader's own reaction marked (read on the conversations' servers).
func (r *Reader) markMine(ctx context.Context, reacted map[msgKey]*protocol.Message, misses map[msgKey][]entryRef,
	pages []Page, userOf func(page int) int64) error {
	us, cs, ss := make([][]int64, len(r.dbs)), make([][]int64, len(r.dbs)), make([][]int64, len(r.dbs))
	seen := map[[3]int64]bool{}
	for k := range reacted {
		for _, ref := range misses[k] {
			t := [3]int64{userOf(ref.page), k.conv, k.seq}
			if !seen[t] {
				seen[t] = true
				s := r.ofConv(k.conv)
				us[s], cs[s], ss[s] = append(us[s], t[0]), append(cs[s], t[1]), append(ss[s], t[2])
			}
		}
	}
	mine := map[[3]int64]string{}
	for s, db := range r.dbs {
		if len(us[s]) == 0 {
			continue
		}
		if err := readMine(ctx, db, us[s], cs[s], ss[s], mine); err != nil {
			return err
		}
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

// readMine adds the reactions of the triples (us, cs, ss) on db to mine.
func readMine(ctx context.Context, db Querier, us, cs, ss []int64, mine map[[3]int64]string) error {
	rs, err := db.Query(ctx, sqlMine, us, cs, ss)
	if err != nil {
		return fmt.Errorf("read the readers' reactions: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var t [3]int64
		var emoji string
		if err := rs.Scan(&t[0], &t[1], &t[2], &emoji); err != nil {
			return fmt.Errorf("read the readers' reactions: %w", err)
		}
		mine[t] = emoji
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("read the readers' reactions: %w", err)
	}
	return nil
}

// loadRecords reads the records of record entries as they are now (the
// projections keep only the current state; versions only grow): in one
// statement on the server of both user and conversation, else the user's
// side on the user's server and the rest on the conversation's
// (rows.SQLRecordsGiven).
func (rd *inboxRead) loadRecords(ctx context.Context) error {
	r := rd.r
	type group struct{ users, convs []int64 }
	groups := map[[2]int]*group{} // by (user's server, conversation's)
	for k := range rd.records {
		gk := [2]int{r.ofUser(k[0]), r.ofConv(k[1])}
		g := groups[gk]
		if g == nil {
			g = &group{}
			groups[gk] = g
		}
		g.users, g.convs = append(g.users, k[0]), append(g.convs, k[1])
	}
	for gk, g := range groups {
		us, cs := gk[0], gk[1]
		if us == cs {
			if err := rd.recordRows(ctx, cs, sqlRecordsByKey, g.users, g.convs); err != nil {
				return err
			}
			continue
		}
		args, err := rd.recordBases(ctx, us, g.users, g.convs)
		if err != nil {
			return err
		}
		if len(args[0].([]int64)) == 0 {
			continue
		}
		if err := rd.recordRows(ctx, cs, rows.SQLRecordsGiven, args...); err != nil {
			return err
		}
	}
	return nil
}

// recordBases reads the user's side of records on server s, as the
// arguments of rows.SQLRecordsGiven.
func (rd *inboxRead) recordBases(ctx context.Context, s int, users, convs []int64) ([]any, error) {
	rs, err := rd.r.dbs[s].Query(ctx, rows.SQLRecordBases, users, convs)
	if err != nil {
		return nil, fmt.Errorf("read %d records: %w", len(users), err)
	}
	defer rs.Close()
	var us, cs, reads, vers []int64
	var pinned, muted, removed []bool
	for rs.Next() {
		var at, u, c, read, ver int64
		var pin, mute, rem bool
		if err := rs.Scan(&at, &u, &c, &pin, &mute, &read, &ver, &rem); err != nil {
			return nil, fmt.Errorf("read records: %w", err)
		}
		if at != rd.epochs[s] {
			return nil, errEpochMoved
		}
		us, cs, reads, vers = append(us, u), append(cs, c), append(reads, read), append(vers, ver)
		pinned, muted, removed = append(pinned, pin), append(muted, mute), append(removed, rem)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read records: %w", err)
	}
	return []any{us, cs, pinned, muted, reads, vers, removed}, nil
}

// recordRows runs a records statement (sqlRecordsByKey, rows.SQLRecordsGiven)
// on server s and sets the records on their entries.
func (rd *inboxRead) recordRows(ctx context.Context, s int, sql string, args ...any) error {
	rs, err := rd.r.dbs[s].Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("read %d records: %w", len(args[0].([]int64)), err)
	}
	defer rs.Close()
	for rs.Next() {
		var at, user int64
		var sc rows.RecordScan
		if err := rs.Scan(append([]any{&at, &user}, sc.Targets()...)...); err != nil {
			return fmt.Errorf("read records: %w", err)
		}
		if rd.epochs[s] != 0 && at != rd.epochs[s] {
			rd.r.known[s].Store(at)
			return errEpochMoved
		}
		rec := sc.Record()
		if rec == nil {
			continue
		}
		b := marshalWire(rec)
		for _, ref := range rd.records[[2]int64{user, rec.ConversationID}] {
			rd.pages[ref.page].Entries[ref.idx].raw = b
		}
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("read records: %w", err)
	}
	return nil
}
