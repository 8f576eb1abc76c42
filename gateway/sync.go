package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
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
func (r *syncResult) etag() string { return etagOf(r.epoch, r.head) }

func etagOf(epoch, head int64) string {
	return `"` + strconv.FormatInt(epoch, 10) + "." + strconv.FormatInt(head, 10) + `"`
}

// readSync answers p for user. It is the read behind GET /v1/sync and the
// WebSocket catch-up. The too-long rules are PROTOCOL.md's: head - after over
// TooLongLag, after below the retained floor, or an epoch that is not the
// current one (with after > 0). A cursor beyond the head (of the current
// epoch) is refused: no answer could ever fill the gap up to it. The epoch,
// head, floor and entries come from one snapshot (readInbox).
func (g *Gateway) readSync(ctx context.Context, user int64, p syncParams) (*syncResult, error) {
	gen := g.hub.Heads().Generation()
	pages, err := g.readInbox(ctx, []inboxReq{{user: user, after: p.after, limit: int32(p.limit)}}, g.cfg.TooLongLag)
	if err != nil {
		return nil, fmt.Errorf("sync of user %d after %d: %w", user, p.after, err)
	}
	pg := pages[0]
	g.hub.Heads().Learn(gen, user, pg.epoch, pg.head)
	res := &syncResult{epoch: pg.epoch, head: pg.head, floor: pg.floor, recordVersion: pg.recordVersion, entries: pg.entries}
	switch {
	case p.hasEpoch && p.epoch != res.epoch && p.after > 0,
		res.head-p.after > g.cfg.TooLongLag,
		p.after < res.floor:
		res.tooLong, res.entries = true, nil
	case p.after > res.head:
		return nil, apierr.BadRequest("after %d is beyond the inbox head %d of epoch %d", p.after, res.head, res.epoch)
	}
	if n := len(res.entries); n > 0 {
		res.hasMore = res.entries[n-1].InboxSeq < res.head
	}
	if res.entries == nil {
		res.entries = []entry{}
	}
	return res, nil
}

// pollingHint grows PollInterval with the held long-polls: 1x idle, 5x at
// the cap, so polling clients slow down as the node fills.
func (g *Gateway) pollingHint() protocol.Polling {
	load := 0.0
	if g.cfg.MaxHeldPolls > 0 {
		load = math.Min(1, float64(g.held.Load())/float64(g.cfg.MaxHeldPolls))
	}
	d := time.Duration(float64(g.cfg.PollInterval) * (1 + 4*load))
	return protocol.Polling{NextIntervalMS: d.Milliseconds()}
}

// tooLongAnswer builds the too-long answer of res: its head (read first, in
// readSync) and then the first page of the conversation list. A commit
// between the two shows up in the list and again after the head, never in
// neither.
func (g *Gateway) tooLongAnswer(ctx context.Context, user int64, res *syncResult, limit int) (*protocol.TooLong, error) {
	recs, next, err := g.listRecords(ctx, user, listParams{limit: limit})
	if err != nil {
		return nil, err
	}
	return &protocol.TooLong{TooLong: true, Epoch: res.epoch, Head: res.head, RecordVersion: res.recordVersion,
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
	if wait == 0 && g.notModified(w, r, user, p) {
		return nil
	}
	var sub *hub.Subscription
	if wait > 0 {
		// Before the first read: a commit after it must wake us.
		sub = g.hub.SubscribeUser(user)
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
		return apierr.Unavailable("too many held long-polls on this node, retry later", 2*time.Second, nil)
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
			return apierr.ErrClientGone
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
		apierr.WriteJSON(w, http.StatusOK, ans)
		return nil
	}
	if allow304 && len(res.entries) == 0 && etagMatch(r.Header.Get("If-None-Match"), res.etag()) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	g.writeSyncPage(w, res)
	return nil
}

// notModified answers 304 from the head cache when the client is at its
// head with the current ETag: no query. Anything else (an unknown user,
// a cache that is not valid, a stale epoch) goes the way of a read.
func (g *Gateway) notModified(w http.ResponseWriter, r *http.Request, user int64, p syncParams) bool {
	inm := r.Header.Get("If-None-Match")
	if inm == "" {
		return false
	}
	epoch, head, ok := g.hub.Heads().Get(user)
	if ok && p.after == head && (!p.hasEpoch || p.epoch == epoch || p.after == 0) {
		tag := etagOf(epoch, head)
		if etagMatch(inm, tag) {
			g.metrics.headHit.Inc()
			h := w.Header()
			h["Etag"] = []string{tag}
			h["Cache-Control"] = []string{"private, no-cache"}
			w.WriteHeader(http.StatusNotModified)
			return true
		}
	}
	g.metrics.headMiss.Inc()
	return false
}

// writeSyncPage writes the 200 answer of a page, a protocol.SyncPage, by
// hand (the entries' messages are cached JSON; see appendEntry).
func (g *Gateway) writeSyncPage(w http.ResponseWriter, res *syncResult) {
	b := make([]byte, 0, 128+entriesSize(res.entries))
	b = protocol.AppendSyncPage(b, res.epoch, res.head, res.hasMore, g.pollingHint(),
		func(b []byte) []byte { return appendEntries(b, res.entries) })
	b = append(b, '\n') // as json.Encoder ends every other body
	h := w.Header()
	h["Content-Type"] = []string{"application/json; charset=utf-8"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
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
