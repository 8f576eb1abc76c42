package inbox

import (
	"context"

	"github.com/inboxd/inboxd/protocol"
)

// Announced is a run of entries that the notifications announced for one
// reader (hub.Subscription.TakeRun): the inbox_seqs First, First+1, ...
// pointing at the messages Keys (conversation, seq), and the epoch and
// head of the page to build from them.
type Announced struct {
	User        int64 // the reader
	Epoch, Head int64
	First       int64
	Keys        [][2]int64
}

// Resolve builds the page of each run from the message cache, and reads
// the messages the cache lacks, for all of them, in one statement. ok[i]
// is false when run i could not be completed (a message not found, a
// failed read, a replay since: errEpochMoved); its entries are then read
// with Read instead.
func (r *Reader) Resolve(ctx context.Context, runs []Announced) (pages []Page, ok []bool) {
	pages = make([]Page, len(runs))
	ok = make([]bool, len(runs))
	var misses map[msgKey][]entryRef
	for i, run := range runs {
		pg := &pages[i]
		pg.Epoch, pg.Head, pg.Entries = run.Epoch, run.Head, make([]Entry, len(run.Keys))
		for j, k := range run.Keys {
			e := &pg.Entries[j]
			e.InboxSeq, e.ConversationID, e.kind = run.First+int64(j), k[0], protocol.KindMessage
			mk := msgKey{epoch: r.epochOf(run, k[0]), conv: k[0], seq: k[1]}
			if b, hit := r.msgs.get(mk, 0); hit {
				e.raw = b
				continue
			}
			if misses == nil {
				misses = map[msgKey][]entryRef{}
			}
			misses[mk] = append(misses[mk], entryRef{page: i, idx: j})
		}
	}
	if len(misses) > 0 {
		// The announced entries are of the readers' epoch; a replay since
		// shows up as errEpochMoved and they are read instead.
		if err := r.loadMessages(ctx, misses, pages, func(page int) int64 { return runs[page].User }); err != nil {
			for _, refs := range misses {
				for _, ref := range refs {
					pages[ref.page].Entries = nil
				}
			}
		}
	}
	for i := range pages {
		complete := len(pages[i].Entries) > 0
		for _, e := range pages[i].Entries {
			complete = complete && e.raw != nil
		}
		ok[i] = complete
	}
	return pages, ok
}

// epochOf is the epoch a message of conv in run is keyed with: the run's
// (its reader's server's) when conv is on the same server, else the last
// known of conv's server.
func (r *Reader) epochOf(run Announced, conv int64) int64 {
	s := r.ofConv(conv)
	if s == r.ofUser(run.User) {
		return run.Epoch
	}
	return r.known[s].Load()
}
