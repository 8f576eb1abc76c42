package inbox

import (
	"context"
	"fmt"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
)

// Query is one client's "entries after N" question: GET /v1/sync's
// parameters, or a WebSocket hello's.
type Query struct {
	After    int64
	Epoch    int64 // meaningful when HasEpoch
	HasEpoch bool
	Limit    int
}

// Result is the answer to a Query: either a page of entries or, when
// TooLong, the head to jump to (Entries are then empty; the caller adds
// the conversation list).
type Result struct {
	Page
	HasMore bool
	TooLong bool
}

// Sync answers q for user. It is the read behind GET /v1/sync and the
// WebSocket catch-up. The too-long rules are docs/protocol.md's: head - after
// over TooLongLag, after below the retained floor, or an epoch that is not
// the current one (with after > 0). A cursor beyond the head (of the
// current epoch) is refused with a bad_request: no answer could ever fill
// the gap up to it. The epoch, head, floor and entries come from one
// snapshot (Read); Config.Heads learns the head.
func (r *Reader) Sync(ctx context.Context, user int64, q Query) (*Result, error) {
	var gen uint64
	if r.heads != nil {
		gen = r.heads.Generation(user)
	}
	req := Req{User: user, After: q.After, Limit: int32(q.Limit), Counts: true, KnownHead: -1, KnownEpoch: -1}
	known, ok := r.counts.get(user)
	if ok {
		req.KnownHead, req.KnownEpoch, req.KnownLarge = known.head, known.epoch, known.large
	}
	pages, err := r.Read(ctx, []Req{req}, r.lag)
	if err != nil {
		return nil, fmt.Errorf("sync of user %d after %d: %w", user, q.After, err)
	}
	res := &Result{Page: pages[0]}
	if res.CountsRead {
		r.counts.put(user, countsAt{epoch: res.Epoch, head: res.Head, large: res.LargeMark, counts: res.Counts})
	} else {
		res.Counts = known.counts // the head, epoch and large list are the remembered ones
	}
	if r.heads != nil {
		r.heads.Learn(gen, user, res.Epoch, res.Head)
	}
	switch {
	case q.HasEpoch && q.Epoch != res.Epoch && q.After > 0,
		res.Head-q.After > r.lag,
		q.After < res.Floor:
		res.TooLong, res.Entries = true, nil
	case q.After > res.Head:
		return nil, apierr.BadRequest("after %d is beyond the inbox head %d of epoch %d", q.After, res.Head, res.Epoch)
	}
	if n := len(res.Entries); n > 0 {
		res.HasMore = res.Entries[n-1].InboxSeq < res.Head
	}
	if res.Entries == nil {
		res.Entries = []Entry{}
	}
	return res, nil
}
