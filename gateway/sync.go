package gateway

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/servers"
	"github.com/inboxd/inboxd/protocol"
)

// pollingHint is the hint of the answers of g (see polling).
func (g *Gateway) pollingHint() protocol.Polling {
	p := polling(g.held.Load(), g.cfg.MaxHeldPolls, g.cfg.PollInterval)
	if g.reconnects != nil {
		// The crash hint, for long-polling clients: the window of the
		// WebSockets and the held polls of this gateway.
		p.Reconnect = g.reconnects.Hint(g.ws.Sessions() + int(g.held.Load()))
	}
	return p
}

// polling grows interval with the held long-polls: 1x idle, 5x at the cap
// maxHeld, so polling clients slow down as the node fills.
func polling(held int64, maxHeld int, interval time.Duration) protocol.Polling {
	load := 0.0
	if maxHeld > 0 {
		load = math.Min(1, float64(held)/float64(maxHeld))
	}
	d := time.Duration(float64(interval) * (1 + 4*load))
	return protocol.Polling{NextIntervalMS: d.Milliseconds()}
}

// tooLongAnswer builds the too-long answer of res: its head (read first, in
// inbox.Reader.Sync) and then the first page of the conversation list. A
// commit between the two shows up in the list and again after the head,
// never in neither.
func tooLongAnswer(ctx context.Context, srv *servers.Servers, blocks *blockCache, user int64, res *inbox.Result, limit int, hint func() protocol.Polling) (*protocol.TooLong, error) {
	recs, next, err := listRecords(ctx, srv, user, listParams{limit: limit})
	if err != nil {
		return nil, err
	}
	blocked, err := blocks.of(ctx, user)
	if err != nil {
		return nil, err
	}
	recs = inbox.MaskRecords(recs, blocked)
	return &protocol.TooLong{TooLong: true, Epoch: res.Epoch, Head: res.Head, RecordVersion: res.RecordVersion,
		Conversations: recs, NextPage: next, Counts: res.Counts, Polling: hint(), Large: res.Large}, nil
}

// rebaser is the WebSocket server's ws.Rebaser: the too-long answer, with
// the first page of Config.PageDefault records and the polling hint of
// the long-polls held by the gateway.
type rebaser struct {
	srv      *servers.Servers
	blocks   *blockCache
	limit    int
	held     *atomic.Int64 // the gateway's count of held long-polls
	maxHeld  int
	interval time.Duration
}

// Rebase implements ws.Rebaser.
func (r *rebaser) Rebase(ctx context.Context, user int64, at *inbox.Result) (*protocol.TooLong, error) {
	return tooLongAnswer(ctx, r.srv, r.blocks, user, at, r.limit, func() protocol.Polling {
		return polling(r.held.Load(), r.maxHeld, r.interval)
	})
}

func (g *Gateway) parseSyncQuery(r *http.Request) (inbox.Query, time.Duration, error) {
	q := r.URL.Query()
	var p inbox.Query
	var err error
	if p.After, err = queryInt(q, "after", 0, 0, math.MaxInt64); err != nil {
		return p, 0, err
	}
	if _, ok := q["epoch"]; ok {
		if p.Epoch, err = queryInt(q, "epoch", 0, 0, math.MaxInt64); err != nil {
			return p, 0, err
		}
		p.HasEpoch = true
	}
	limit, err := queryInt(q, "limit", int64(g.cfg.PageDefault), 1, int64(g.cfg.PageMax))
	if err != nil {
		return p, 0, err
	}
	p.Limit = int(limit)
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
	if err := g.admitSync(wait); err != nil {
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
	res, err := g.inbox.Sync(ctx, user, p)
	if err != nil {
		return err
	}
	news := res.TooLong || len(res.Entries) > 0 || largeNews(r, res)
	if sub != nil && !news && g.isDraining() {
		if err := g.drainedPoll(); err != nil {
			return err
		}
	}
	if news || sub == nil || g.isDraining() {
		return g.writeSync(w, r, user, p, res, sub == nil)
	}
	if !g.acquireHold() {
		return apierr.Unavailable("too many held long-polls on this node, retry later", 2*time.Second, nil)
	}
	defer g.releaseHold()
	// The read-mode conversations move without the user's head: wake on
	// theirs too, and end when the list differs from this read's.
	stop := g.hub.WatchConversations(sub, largeConvs(res.Large))
	defer stop()
	base := largeHash(res.Large)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-sub.C():
			if res, err = g.inbox.Sync(ctx, user, p); err != nil {
				return err
			}
			if res.TooLong || len(res.Entries) > 0 || largeHash(res.Large) != base {
				g.metrics.polls.WithLabelValues("woken").Inc()
				return g.writeSync(w, r, user, p, res, false)
			}
		case <-timer.C:
			// A last read covers a notification lost with the LISTEN connection.
			g.metrics.polls.WithLabelValues("timeout").Inc()
			if res, err = g.inbox.Sync(ctx, user, p); err != nil {
				return err
			}
			return g.writeSync(w, r, user, p, res, false)
		case <-g.draining:
			g.metrics.polls.WithLabelValues("drained").Inc()
			w.Header().Set("Connection", "close")
			if err := g.drainedPoll(); err != nil {
				return err // nothing new since the read: the 503 loses nothing
			}
			return g.writeSync(w, r, user, p, res, false)
		case <-ctx.Done():
			g.metrics.polls.WithLabelValues("gone").Inc()
			return apierr.ErrClientGone
		}
	}
}

// largeNews reports whether a long-poll must answer at once because the
// client's If-None-Match names another large list than res's: the client
// is behind on its read-mode conversations. Without the header (or with
// one that names no single tag) it holds, as before.
func largeNews(r *http.Request, res *inbox.Result) bool {
	known, ok := knownLargeHash(r.Header.Get("If-None-Match"))
	return ok && known != largeHash(res.Large)
}

// writeSync answers a sync. allow304 is false for a long-poll: docs/protocol.md
// says a wait that ends with nothing new answers 200 with entries: [], so a
// held request never turns into a 304.
func (g *Gateway) writeSync(w http.ResponseWriter, r *http.Request, user int64, p inbox.Query, res *inbox.Result, allow304 bool) error {
	h := w.Header()
	tag := etagOf(res.Epoch, res.Head, res.Large)
	h.Set("ETag", tag)
	h.Set("Cache-Control", "private, no-cache")
	if res.TooLong {
		ans, err := tooLongAnswer(r.Context(), g.srv, g.blocks, user, res, p.Limit, g.pollingHint)
		if err != nil {
			return err
		}
		apierr.WriteJSON(w, http.StatusOK, ans)
		return nil
	}
	if allow304 && len(res.Entries) == 0 && etagMatch(r.Header.Get("If-None-Match"), tag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	// The entries of senders the user blocks are marked and emptied, by
	// its blocks now (docs/protocol.md, "Blocks").
	blocked, err := g.blocks.of(r.Context(), user)
	if err != nil {
		return err
	}
	if len(blocked) > 0 {
		masked := *res
		masked.Entries = inbox.MaskBlocked(res.Entries, blocked)
		res = &masked
	}
	g.writeSyncPage(w, res)
	return nil
}

// notModified answers 304 from the head cache when the client is at its
// head with the current ETag: no query. Anything else (an unknown user,
// a cache that is not valid, a stale epoch) goes the way of a read.
func (g *Gateway) notModified(w http.ResponseWriter, r *http.Request, user int64, p inbox.Query) bool {
	inm := r.Header.Get("If-None-Match")
	if inm == "" {
		return false
	}
	epoch, head, ok := g.hub.HeadsOf(user).Get(user)
	if ok && p.After == head && (!p.HasEpoch || p.Epoch == epoch || p.After == 0) {
		tag := etagOf(epoch, head, nil) // see large.go: only users without a large list match
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
// hand (the entries' messages are cached JSON; see inbox.AppendEntries).
func (g *Gateway) writeSyncPage(w http.ResponseWriter, res *inbox.Result) {
	b := make([]byte, 0, 128+inbox.EntriesSize(res.Entries)+64*len(res.Large))
	b = protocol.AppendSyncPage(b, res.Epoch, res.Head, res.HasMore, res.Counts, g.pollingHint(), res.Large,
		func(b []byte) []byte { return inbox.AppendEntries(b, res.Entries) })
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
