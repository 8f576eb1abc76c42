package projector

import (
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/events"
)

// Imported history (docs/import.md): the events `inboxd import` appends
// carry imported_at. An imported message takes its seq and keeps its
// original time, but no member gets an inbox entry of it (an imported join:
// its joiner only), and every current member's read position moves past
// it, so that imported history is never unread and never floods an inbox.
// The entries an imported event does make carry imported_at as their time,
// so that retention counts from the import, not from the original time.

// sqlImportedRead moves the read positions of the current members of each
// conversation ($1) to its last imported message ($2), after the batch's
// spans and records are written. No version and no entry: like a sender's
// own message (readOwn), imported history is read by construction, and a
// record entry carries the record as it is when read.
const sqlImportedRead = `UPDATE records r SET read_seq = u.s
FROM unnest($1::bigint[], $2::bigint[]) AS u(c, s)
JOIN member_spans m ON m.conversation_id = u.c AND m.left_seq IS NULL
WHERE r.user_id = m.user_id AND r.conversation_id = u.c AND r.read_seq < u.s`

// imported ends the apply of imported event e: the entries it added (from
// fan[from:]) take its imported_at, and importing is reset.
func (b *batch) imported(e *events.Event, from int) {
	b.importing = false
	for i := from; i < len(b.fan); i++ {
		b.fan[i].at = *e.ImportedAt
	}
}

// queueImportedRead queues sqlImportedRead for the batch's imported
// messages; the records loaded for the batch learn it too.
func (b *batch) queueImportedRead(bt *pgx.Batch) {
	n := len(b.importedRead)
	if n == 0 {
		return
	}
	cs, ss := make([]int64, 0, n), make([]int64, 0, n)
	for c, s := range b.importedRead {
		cs, ss = append(cs, c), append(ss, s)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i] < cs[j] })
	for i, c := range cs {
		ss[i] = b.importedRead[c]
	}
	bt.Queue(sqlImportedRead, cs, ss)
}
