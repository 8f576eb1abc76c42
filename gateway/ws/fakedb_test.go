package ws

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// fakeDB is an inbox.Querier over an in-memory inbox: what the statements
// of package inbox read (the key read of one user or many, messages by
// key, the large lists, a read-mode conversation's news), answered from
// maps instead of PostgreSQL. It records every statement it answers (log)
// so that tests can tell what the pusher asked for, and in which order.
type fakeDB struct {
	mu    sync.Mutex
	epoch int64
	users map[int64]*fakeUser
	msgs  map[[2]int64]protocol.Message // by (conversation, seq)
	large map[int64][]inbox.LargeMembership
	news  map[int64][]protocol.Message // read-mode conversations' messages, by seq

	log []dbCall

	// readErr fails the key reads of the pusher (not the hello's), the
	// next readFails of them (all while negative); syncErr fails the
	// hello's.
	readErr, syncErr error
	readFails        int
	// syncGate, when set, holds the hello's reads until it is closed.
	syncGate chan struct{}
}

// fakeUser is one user's inbox.
type fakeUser struct {
	head, floor, recordVersion int64
	counts                     protocol.Counts
	entries                    []fakeEntry
}

// fakeEntry is a message entry: inbox_seq -> (conversation, seq).
type fakeEntry struct{ inboxSeq, conv, seq int64 }

// dbCall is one statement the fake answered: what kind, and for key reads
// the users and cursors asked for (for messages by key, the
// conversations and seqs).
type dbCall struct {
	kind          string // "sync", "read", "messages", "large_lists", "members_among", "large_news"
	users, afters []int64
}

func newFakeDB() *fakeDB {
	return &fakeDB{epoch: 1, users: map[int64]*fakeUser{}, msgs: map[[2]int64]protocol.Message{},
		large: map[int64][]inbox.LargeMembership{}, news: map[int64][]protocol.Message{}}
}

func (d *fakeDB) userLocked(u int64) *fakeUser {
	fu := d.users[u]
	if fu == nil {
		fu = &fakeUser{}
		d.users[u] = fu
	}
	return fu
}

// appendMessages appends n messages of conversation conv to user's inbox
// and returns their entries (inbox_seq, conversation, seq).
func (d *fakeDB) appendMessages(user, conv int64, n int) []fakeEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	fu := d.userLocked(user)
	var out []fakeEntry
	for range n {
		seq := int64(1)
		for k := range d.msgs {
			if k[0] == conv && k[1] >= seq {
				seq = k[1] + 1
			}
		}
		fu.head++
		e := fakeEntry{inboxSeq: fu.head, conv: conv, seq: seq}
		fu.entries = append(fu.entries, e)
		d.msgs[[2]int64{conv, seq}] = protocol.Message{ConversationID: conv, Seq: seq,
			MsgID: fmt.Sprintf("00000000-0000-4000-8000-%012d", conv*1000+seq), SenderID: 99, Kind: protocol.MessageText,
			Body: []byte(strconv.Quote(fmt.Sprintf("m%d.%d", conv, seq))), CreatedAt: time.Unix(1700000000, 0).UTC()}
		out = append(out, e)
	}
	return out
}

// msg is message (conv, seq).
func (d *fakeDB) msg(conv, seq int64) protocol.Message {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.msgs[[2]int64{conv, seq}]
}

// set changes user's inbox under the lock.
func (d *fakeDB) set(user int64, f func(u *fakeUser)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(d.userLocked(user))
}

// failSync makes the hello's reads fail with err (nil: succeed).
func (d *fakeDB) failSync(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncErr = err
}

// holdSyncs holds the hello's reads until release is closed.
func (d *fakeDB) holdSyncs(release chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncGate = release
}

// failReads makes the next n reads of the pusher fail with err.
func (d *fakeDB) failReads(err error, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.readErr, d.readFails = err, n
}

// setEpoch starts epoch (a replay swapped the projections).
func (d *fakeDB) setEpoch(epoch int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.epoch = epoch
}

// setLarge sets user's large list.
func (d *fakeDB) setLarge(user int64, list []inbox.LargeMembership) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.large[user] = list
}

// setNews makes read-mode conversation conv's messages seqs 1..n.
func (d *fakeDB) setNews(conv int64, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.news[conv] = nil
	for seq := int64(1); seq <= int64(n); seq++ {
		d.news[conv] = append(d.news[conv], protocol.Message{ConversationID: conv, Seq: seq,
			MsgID: fmt.Sprintf("00000000-0000-4000-9000-%012d", seq), SenderID: 98, Kind: protocol.MessageText,
			Body: []byte(strconv.Quote("news")), CreatedAt: time.Unix(1700000000, 0).UTC()})
	}
}

// calledOf is the calls of kind so far.
func (d *fakeDB) calledOf(kind string) []dbCall {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []dbCall
	for _, c := range d.log {
		if c.kind == kind {
			out = append(out, c)
		}
	}
	return out
}

func (d *fakeDB) record(c dbCall) {
	d.log = append(d.log, c)
}

// Query answers the statements of package inbox by their text.
func (d *fakeDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	switch {
	case strings.Contains(sql, "FROM inbox i"):
		return d.keyRead(ctx, args)
	case strings.Contains(sql, "AS k(conversation_id, seq)"):
		return d.messagesByKey(args)
	case strings.Contains(sql, "s.user_id = ANY($1::bigint[])"):
		return d.largeLists(args)
	case strings.Contains(sql, "user_id = ANY($2::bigint[])"):
		return d.membersAmong(args)
	case strings.Contains(sql, "m.seq > $2"):
		return d.largeNew(args)
	case strings.Contains(sql, "m.changed_ord > $2"):
		return &fakeRows{}, nil // no changed messages in these tests
	}
	return nil, fmt.Errorf("fakeDB: statement not faked: %.80s", sql)
}

// keyRead is the key read (inbox.Reader.Read and Sync): one row per
// request, with the key arrays of the entries the SQL would return.
func (d *fakeDB) keyRead(ctx context.Context, args []any) (pgx.Rows, error) {
	var users, afters []int64
	var limits []int32
	counts := len(args) == 7
	switch u := args[0].(type) {
	case int64:
		users, afters, limits = []int64{u}, []int64{args[1].(int64)}, []int32{args[2].(int32)}
	case []int64:
		users, afters, limits = u, args[1].([]int64), args[2].([]int32)
	default:
		return nil, fmt.Errorf("fakeDB: key read of %T", args[0])
	}
	maxLag := args[3].(int64)
	kind := "read"
	if counts {
		kind = "sync"
	}
	d.mu.Lock()
	d.record(dbCall{kind: kind, users: users, afters: afters})
	var gate chan struct{}
	var err error
	switch {
	case counts:
		gate, err = d.syncGate, d.syncErr
	case d.readErr != nil && d.readFails != 0:
		err = d.readErr
		d.readFails--
	}
	d.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	rs := &fakeRows{fds: textFields(17)}
	for i, u := range users {
		fu := d.userLocked(u)
		var seqs, convs, kinds, mseqs, vers []int64
		after := afters[i]
		if after >= fu.floor && fu.head-after <= maxLag {
			for _, e := range fu.entries {
				if e.inboxSeq > after && e.inboxSeq <= fu.head && len(seqs) < int(limits[i]) {
					seqs, convs, kinds = append(seqs, e.inboxSeq), append(convs, e.conv), append(kinds, projection.KindMessage)
					mseqs, vers = append(mseqs, e.seq), append(vers, 1)
				}
			}
		}
		row := [][]byte{num(int64(i + 1)), num(d.epoch), num(fu.head), num(fu.floor), num(fu.recordVersion),
			arr(seqs), arr(convs), arr(kinds), arr(mseqs), arr(vers), nil, nil, nil, nil, nil, nil, nil}
		if counts {
			row[10], row[11] = num(fu.counts.UnreadTotal), num(fu.counts.MentionTotal)
			var ids, last, chg, joined []int64
			for _, m := range d.large[u] {
				ids, last, chg, joined = append(ids, m.ConversationID), append(last, m.LastSeq), append(chg, m.ChangeCount), append(joined, m.JoinedSeq)
			}
			row[12], row[13], row[14], row[15] = arr(ids), arr(last), arr(chg), arr(joined)
			row[16] = []byte{}
			if len(ids) > 0 {
				row[16] = []byte(fmt.Sprint(ids, last, chg))
			}
		}
		rs.raw = append(rs.raw, row)
	}
	return rs, nil
}

// messagesByKey is sqlMessagesByKey: the epoch and MessageCols of each
// message asked for.
func (d *fakeDB) messagesByKey(args []any) (pgx.Rows, error) {
	convs, seqs := args[0].([]int64), args[1].([]int64)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(dbCall{kind: "messages", users: convs, afters: seqs})
	rs := &fakeRows{}
	for i := range convs {
		m, ok := d.msgs[[2]int64{convs[i], seqs[i]}]
		if !ok {
			continue
		}
		rs.vals = append(rs.vals, append([]any{d.epoch}, messageCols(m)...))
	}
	return rs, nil
}

// messageCols are the values of rows.MessageCols for m.
func messageCols(m protocol.Message) []any {
	body, _ := strconv.Unquote(string(m.Body))
	return []any{m.ConversationID, m.Seq, m.MsgID, m.SenderID, m.Kind, body, m.CreatedAt,
		int64(1), nil, false, nil, nil, nil, false, int64(0), nil, nil, nil}
}

// largeLists is sqlLargeLists.
func (d *fakeDB) largeLists(args []any) (pgx.Rows, error) {
	users := args[0].([]int64)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(dbCall{kind: "large_lists", users: users})
	rs := &fakeRows{}
	for _, u := range users {
		for _, m := range d.large[u] {
			rs.vals = append(rs.vals, []any{u, m.ConversationID, m.LastSeq, m.ChangeCount, m.JoinedSeq})
		}
	}
	return rs, nil
}

// membersAmong is sqlMembersAmong: the users among $2 whose large list
// has conversation $1.
func (d *fakeDB) membersAmong(args []any) (pgx.Rows, error) {
	conv, users := args[0].(int64), args[1].([]int64)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(dbCall{kind: "members_among", users: users})
	rs := &fakeRows{}
	for _, u := range users {
		for _, m := range d.large[u] {
			if m.ConversationID == conv {
				rs.vals = append(rs.vals, []any{u})
			}
		}
	}
	return rs, nil
}

// largeNew is sqlLargeNew: the newest messages of $1 with $2 < seq <= $4,
// $3 at most, newest first.
func (d *fakeDB) largeNew(args []any) (pgx.Rows, error) {
	conv, after, limit, upto := args[0].(int64), args[1].(int64), args[2].(int), args[3].(int64)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(dbCall{kind: "large_news", users: []int64{conv}, afters: []int64{after}})
	rs := &fakeRows{}
	msgs := d.news[conv]
	for i := len(msgs) - 1; i >= 0 && len(rs.vals) < limit; i-- {
		if m := msgs[i]; m.Seq > after && m.Seq <= upto {
			rs.vals = append(rs.vals, messageCols(m))
		}
	}
	return rs, nil
}

// num and arr are PostgreSQL's text forms of a bigint and a bigint[]
// (NULL for an empty array, as array_agg of no rows).
func num(v int64) []byte { return strconv.AppendInt(nil, v, 10) }

func arr(v []int64) []byte {
	if len(v) == 0 {
		return nil
	}
	b := []byte{'{'}
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, x, 10)
	}
	return append(b, '}')
}

func textFields(n int) []pgconn.FieldDescription {
	fds := make([]pgconn.FieldDescription, n)
	for i := range fds {
		fds[i] = pgconn.FieldDescription{Name: fmt.Sprintf("c%d", i), Format: pgx.TextFormatCode}
	}
	return fds
}

// fakeRows is pgx.Rows over raw text rows (for RawValues) or Go values
// (for Scan).
type fakeRows struct {
	fds  []pgconn.FieldDescription
	raw  [][][]byte
	vals [][]any
	i    int
}

func (r *fakeRows) Close()                                       {}
func (r *fakeRows) Err() error                                   { return nil }
func (r *fakeRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r *fakeRows) FieldDescriptions() []pgconn.FieldDescription { return r.fds }
func (r *fakeRows) Conn() *pgx.Conn                              { return nil }
func (r *fakeRows) TypeMap() *pgtype.Map                         { return pgtype.NewMap() }
func (r *fakeRows) RawValues() [][]byte                          { return r.raw[r.i-1] }
func (r *fakeRows) Values() ([]any, error)                       { return r.vals[r.i-1], nil }

func (r *fakeRows) Next() bool {
	if r.i >= max(len(r.raw), len(r.vals)) {
		return false
	}
	r.i++
	return true
}

// Scan sets each destination (a pointer) from the row's value: nil is the
// zero value (SQL NULL), a T goes into a *T or a **T.
func (r *fakeRows) Scan(dest ...any) error {
	row := r.vals[r.i-1]
	if len(dest) != len(row) {
		return fmt.Errorf("fakeRows: scan of %d into %d", len(row), len(dest))
	}
	for i, d := range dest {
		dv := reflect.ValueOf(d)
		if dv.Kind() != reflect.Pointer {
			return errors.New("fakeRows: scan into a non-pointer")
		}
		el := dv.Elem()
		if row[i] == nil {
			el.SetZero()
			continue
		}
		v := reflect.ValueOf(row[i])
		switch {
		case v.Type().AssignableTo(el.Type()):
			el.Set(v)
		case el.Kind() == reflect.Pointer && v.Type().AssignableTo(el.Type().Elem()):
			p := reflect.New(v.Type())
			p.Elem().Set(v)
			el.Set(p)
		default:
			return fmt.Errorf("fakeRows: column %d: %T into %s", i, row[i], el.Type())
		}
	}
	return nil
}
