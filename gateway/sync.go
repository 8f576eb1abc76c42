package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/projector"
)

// syncParams is one "entries after N" question.
type syncParams struct {
	after    int64
	epoch    int64 // meaningful when hasEpoch
	hasEpoch bool
	limit    int
}

// syncResult is the answer to a syncParams: either a page of entries or,
// when tooLong, the head to jump to (entries are then empty; the caller adds
// the conversation list with tooLongAnswer).
type syncResult struct {
	epoch, head, floor, recordVersion int64
	entries                           []entry
	hasMore                           bool
	tooLong                           bool
}

// etag is the validator of the answer: the epoch and head it was read at.
func (r *syncResult) etag() string {
	return `"` + strconv.FormatInt(r.epoch, 10) + "." + strconv.FormatInt(r.head, 10) + `"`
}

// sqlSync reads, in one statement and so one snapshot, the epoch, the
// user's head and floor and, unless the answer is too long, the page of
// entries after the cursor with their messages or records inline. A user
// without a row has head 0.
//
// $1 user, $2 after, $3 limit, $4 too-long lag, $5 epoch of the client or NULL.
//
// The head row is built from scalar subqueries so that the planner knows it
// is one row: a join with the (rarely analyzed) meta table is estimated at
// thousands of rows, which prices the query high enough to trigger JIT
// compilation, hundreds of milliseconds per execution.
const sqlSync = `WITH h AS (
	SELECT (SELECT epoch FROM meta) AS epoch, COALESCE(u.inbox_seq, 0) AS head,
		COALESCE(u.inbox_floor, 0) AS floor, COALESCE(u.record_version, 0) AS record_version
	FROM (SELECT 1) one LEFT JOIN users u ON u.id = $1
), e AS (
	SELECT i.inbox_seq, i.conversation_id, i.kind, i.seq FROM h, inbox i
	WHERE i.user_id = $1 AND i.inbox_seq > $2 AND i.inbox_seq <= h.head
		AND h.head - $2 <= $4 AND $2 >= h.floor AND ($5::bigint IS NULL OR $2 = 0 OR $5 = h.epoch)
	ORDER BY i.inbox_seq LIMIT $3
)
SELECT h.epoch, h.head, h.floor, h.record_version, e.inbox_seq, e.conversation_id, e.kind,
	` + sqlMessageCols + `, ` + sqlRecordCols + `
FROM h LEFT JOIN e ON true
LEFT JOIN messages m ON e.kind = 1 AND m.conversation_id = e.conversation_id AND m.seq = e.seq
LEFT JOIN records r ON e.kind = 2 AND r.user_id = $1 AND r.conversation_id = e.conversation_id` + sqlRecordJoins + `
ORDER BY e.inbox_seq`

// readSync answers p for user. It is the query behind GET /v1/sync and the
// WebSocket catch-up. The too-long rules are PROTOCOL.md's: head - after over
// TooLongLag, after below the retained floor, or an epoch that is not the
// current one (with after > 0). A cursor beyond the head (of the current
// epoch) is refused: no answer could ever fill the gap up to it.
func (g *Gateway) readSync(ctx context.Context, user int64, p syncParams) (*syncResult, error) {
	var epoch any
	if p.hasEpoch {
		epoch = p.epoch
	}
	rows, err := g.pool.Query(ctx, sqlSync, user, p.after, p.limit, g.cfg.TooLongLag, epoch)
	if err != nil {
		return nil, fmt.Errorf("sync of user %d after %d: %w", user, p.after, err)
	}
	defer rows.Close()
	res := &syncResult{}
	for rows.Next() {
		var (
			inboxSeq, conv *int64
			kind           *int16
			m              msgScan
			rec            recScan
		)
		targets := append([]any{&res.epoch, &res.head, &res.floor, &res.recordVersion, &inboxSeq, &conv, &kind}, m.targets()...)
		if err := rows.Scan(append(targets, rec.targets()...)...); err != nil {
			return nil, fmt.Errorf("sync of user %d: %w", user, err)
		}
		if inboxSeq == nil {
			continue // the head row without entries
		}
		e := entry{InboxSeq: *inboxSeq, ConversationID: *conv}
		if *kind == projector.KindRecord {
			e.Kind, e.Record = entryKindRecord, rec.record()
		} else {
			e.Kind, e.Message = entryKindMessage, m.message()
		}
		res.entries = append(res.entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sync of user %d: %w", user, err)
	}
	switch {
	case p.hasEpoch && p.epoch != res.epoch && p.after > 0,
		res.head-p.after > g.cfg.TooLongLag,
		p.after < res.floor:
		res.tooLong, res.entries = true, nil
	case p.after > res.head:
		return nil, badRequest("after %d is beyond the inbox head %d of epoch %d", p.after, res.head, res.epoch)
	}
	if n := len(res.entries); n > 0 {
		res.hasMore = res.entries[n-1].InboxSeq < res.head
	}
	if res.entries == nil {
		res.entries = []entry{}
	}
	return res, nil
}

// polling is the _polling hint.
type polling struct {
	NextIntervalMS int64 `json:"next_interval_ms"`
}

// pollingHint grows PollInterval with the held long-polls: 1x idle, 5x at
// the cap, so polling clients slow down as the node fills.
func (g *Gateway) pollingHint() polling {
	load := 0.0
	if g.cfg.MaxHeldPolls > 0 {
		load = math.Min(1, float64(g.held.Load())/float64(g.cfg.MaxHeldPolls))
	}
	d := time.Duration(float64(g.cfg.PollInterval) * (1 + 4*load))
	return polling{NextIntervalMS: d.Milliseconds()}
}

type syncResponse struct {
	Epoch   int64   `json:"epoch"`
	Head    int64   `json:"head"`
	Entries []entry `json:"entries"`
	HasMore bool    `json:"has_more"`
	Polling polling `json:"_polling"`
}

// tooLongResponse is the too-long answer of sync (HTTP and WebSocket).
type tooLongResponse struct {
	TooLong       bool     `json:"too_long"`
	Epoch         int64    `json:"epoch"`
	Head          int64    `json:"head"`
	RecordVersion int64    `json:"record_version"`
	Conversations []record `json:"conversations"`
	NextPage      *string  `json:"next_page"`
	Polling       polling  `json:"_polling"`
}

// tooLongAnswer builds the too-long answer of res: its head (read first, in
// readSync) and then the first page of the conversation list. A commit
// between the two shows up in the list and again after the head, never in
// neither.
func (g *Gateway) tooLongAnswer(ctx context.Context, user int64, res *syncResult, limit int) (*tooLongResponse, error) {
	recs, next, err := g.listRecords(ctx, user, listParams{limit: limit})
	if err != nil {
		return nil, err
	}
	return &tooLongResponse{TooLong: true, Epoch: res.epoch, Head: res.head, RecordVersion: res.recordVersion,
		Conversations: recs, NextPage: next, Polling: g.pollingHint()}, nil
}

func (g *Gateway) parseSyncQuery(r *http.Request) (syncParams, time.Duration, error) {
	q := r.URL.Query()
	var p syncParams
	var err error
	if p.after, err = queryInt(q, "after", 0, 0, math.MaxInt64); err != nil {
		return p, 0, err
	}
	if _, ok := q["epoch"]; ok {
		if p.epoch, err = queryInt(q, "epoch", 0, 0, math.MaxInt64); err != nil {
			return p, 0, err
		}
		p.hasEpoch = true
	}
	limit, err := queryInt(q, "limit", int64(g.cfg.PageDefault), 1, int64(g.cfg.PageMax))
	if err != nil {
		return p, 0, err
	}
	p.limit = int(limit)
	wait, err := queryInt(q, "wait", 0, 0, int64(g.cfg.LongPollMax/time.Second))
	if err != nil {
		return p, 0, err
	}
	return p, time.Duration(wait) * time.Second, nil
}

// handleSync is GET /v1/sync: a page of entries, a too-long answer, a 304,
// or a long-poll held until the user's head moves or the wait ends.
func (g *Gateway) handleSync(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	p, wait, err := g.parseSyncQuery(r)
	if err != nil {
		return err
	}
	var sub *subscription
	if wait > 0 {
		// Before the first read: a commit after it must wake us.
		sub = g.hub.subscribeUser(user)
		defer sub.Close()
	}
	res, err := g.readSync(ctx, user, p)
	if err != nil {
		return err
	}
	if res.tooLong || len(res.entries) > 0 || sub == nil || g.isDraining() {
		return g.writeSync(w, r, user, p, res, sub == nil)
	}
	if !g.acquireHold() {
		return unavailable("too many held long-polls on this node, retry later", 2*time.Second, nil)
	}
	defer g.releaseHold()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-sub.C():
			if res, err = g.readSync(ctx, user, p); err != nil {
				return err
			}
			if res.tooLong || len(res.entries) > 0 {
				g.metrics.polls.WithLabelValues("woken").Inc()
				return g.writeSync(w, r, user, p, res, false)
			}
		case <-timer.C:
			// A last read covers a notification lost with the LISTEN connection.
			g.metrics.polls.WithLabelValues("timeout").Inc()
			if res, err = g.readSync(ctx, user, p); err != nil {
				return err
			}
			return g.writeSync(w, r, user, p, res, false)
		case <-g.draining:
			g.metrics.polls.WithLabelValues("drained").Inc()
			w.Header().Set("Connection", "close")
			return g.writeSync(w, r, user, p, res, false)
		case <-ctx.Done():
			g.metrics.polls.WithLabelValues("gone").Inc()
			return errClientGone
		}
	}
}

// writeSync answers a sync. allow304 is false for a long-poll: PROTOCOL.md
// says a wait that ends with nothing new answers 200 with entries: [], so a
// held request never turns into a 304.
func (g *Gateway) writeSync(w http.ResponseWriter, r *http.Request, user int64, p syncParams, res *syncResult, allow304 bool) error {
	h := w.Header()
	h.Set("ETag", res.etag())
	h.Set("Cache-Control", "private, no-cache")
	if res.tooLong {
		ans, err := g.tooLongAnswer(r.Context(), user, res, p.limit)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, ans)
		return nil
	}
	if allow304 && len(res.entries) == 0 && etagMatch(r.Header.Get("If-None-Match"), res.etag()) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	writeJSON(w, http.StatusOK, syncResponse{Epoch: res.epoch, Head: res.head, Entries: res.entries,
		HasMore: res.hasMore, Polling: g.pollingHint()})
	return nil
}

// etagMatch implements If-None-Match's weak comparison against one tag.
func etagMatch(header, tag string) bool {
	if header == "" {
		return false
	}
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == tag {
			return true
		}
	}
	return false
}
