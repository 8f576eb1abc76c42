package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/servers"
	"github.com/inboxd/inboxd/protocol"
)

// Blocks between users (docs/protocol.md, "Blocks"; docs/decisions.md,
// "Blocks between users"). PUT and DELETE /v1/blocks/{uid} append
// user.blocked and user.unblocked, keyed by the blocker, which the
// projection writes into the blocker's server's blocks table; GET
// /v1/blocks lists them. What a block does is judged here, when read: the
// blocker's entries of the blocked user's messages are marked and emptied
// (sync, history, pushes), its typing, presence and receipts are not shown
// to the blocker, and the blocked user may not start a conversation with
// the blocker or add it to one (403). The last is judged by the gateway
// only: the block and the add are on different partitions of the log,
// which orders neither before the other (docs/decisions.md).

// blocksRefresh is how long a gateway trusts a user's blocks it read: a
// block made through another gateway is seen here within it. The gateway
// that answers a PUT, DELETE or GET of the blocks reads them again (a PUT
// or DELETE once projected, awaitBlock).
const blocksRefresh = 5 * time.Second

// maxBlockCacheUsers bounds the users whose blocks a gateway keeps; past
// it the cache starts again empty (each entry is read again on use).
const maxBlockCacheUsers = 100_000

// Blocks are listed by blocked user id, the page token being the last
// one of the previous page.
const (
	sqlBlocksOf   = `SELECT blocked_id FROM blocks WHERE blocker_id = $1`
	sqlBlocksPage = `SELECT blocked_id, at FROM blocks WHERE blocker_id = $1 AND blocked_id > $2
ORDER BY blocked_id LIMIT $3`
	sqlBlocks1 = `SELECT EXISTS (SELECT 1 FROM blocks WHERE blocker_id = $1 AND blocked_id = $2)`
	// sqlBlockedBy lists which of users $1 block $2: a point lookup each.
	sqlBlockedBy = `SELECT blocker_id FROM blocks WHERE blocker_id = ANY($1::bigint[]) AND blocked_id = $2
ORDER BY blocker_id LIMIT 1`
)

// DefaultBlockPage and MaxBlockPage bound GET /v1/blocks?limit=.
const (
	DefaultBlockPage = 100
	MaxBlockPage     = 1000
)

// blockCache is a gateway's copy of the blocks of the users it serves,
// each read on the user's server and trusted for blocksRefresh. It is safe
// for concurrent use; the sets it hands out are never modified.
type blockCache struct {
	srv *servers.Servers
	now func() time.Time

	mu    sync.Mutex
	users map[int64]blockEntry
}

type blockEntry struct {
	set  inbox.Blocked
	read time.Time
}

func newBlockCache(srv *servers.Servers) *blockCache {
	return &blockCache{srv: srv, now: time.Now, users: map[int64]blockEntry{}}
}

// of returns the users user blocks: nil when none.
func (c *blockCache) of(ctx context.Context, user int64) (inbox.Blocked, error) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.users[user]
	c.mu.Unlock()
	if ok && now.Sub(e.read) < blocksRefresh {
		return e.set, nil
	}
	return c.load(ctx, user)
}

// load reads user's blocks on its server and keeps them.
func (c *blockCache) load(ctx context.Context, user int64) (inbox.Blocked, error) {
	read := c.now()
	rows, _ := c.srv.User(user).Query(ctx, sqlBlocksOf, user)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("blocks of user %d: %w", user, err)
	}
	var set inbox.Blocked
	if len(ids) > 0 {
		set = make(inbox.Blocked, len(ids))
		for _, id := range ids {
			set[id] = struct{}{}
		}
	}
	c.mu.Lock()
	if len(c.users) >= maxBlockCacheUsers {
		clear(c.users)
	}
	c.users[user] = blockEntry{set: set, read: read}
	c.mu.Unlock()
	return set, nil
}

// Of is of, for the WebSocket pushes (ws.Blocks).
func (c *blockCache) Of(ctx context.Context, user int64) (inbox.Blocked, error) {
	return c.of(ctx, user)
}

// Blocks says whether blocker blocks other (ephemeral.Blocks): a frame
// about other is not delivered to blocker. A failed read shows the frame:
// typing and presence are not worth an error.
func (c *blockCache) Blocks(ctx context.Context, blocker, other int64) bool {
	set, err := c.of(ctx, blocker)
	return err == nil && set.Has(other)
}

// handleBlock is PUT (block) or DELETE (unblock) of /v1/blocks/{uid}:
// 202 when the event is appended (after the read-your-writes wait), 204
// when the caller already blocks (or does not block) uid, so nothing is.
// Nobody blocks itself (400).
func (g *Gateway) handleBlock(typ string) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		ctx := r.Context()
		user := userFrom(ctx)
		uid, err := pathID(r, "uid")
		if err != nil {
			return err
		}
		if uid == user {
			return apierr.BadRequest("a user does not block itself")
		}
		var blocked bool
		if err := g.srv.User(user).QueryRow(ctx, sqlBlocks1, user, uid).Scan(&blocked); err != nil {
			return fmt.Errorf("block of %d by %d: %w", uid, user, err)
		}
		if blocked == (typ == events.UserBlocked) {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
		e := events.New(typ, 0, user)
		e.UserID = uid
		if err := g.members.Append(ctx, e); err != nil {
			return err
		}
		if err := g.awaitBlock(ctx, user, uid, typ == events.UserBlocked); err != nil {
			return err
		}
		writeAccepted(w)
		return nil
	}
}

// awaitBlock waits up to Config.AckWait for the projection of user's block
// (or unblock) of uid, as other writes wait for theirs, so that the
// caller's next read on this gateway judges by it; then it reads the
// user's blocks into the cache. A block moves no inbox, so no notification
// would wake the wait: it polls one point lookup, from 10 ms, doubling to
// 100 ms. Past the wait the answer is 202 all the same.
func (g *Gateway) awaitBlock(ctx context.Context, user, uid int64, want bool) error {
	deadline := time.Now().Add(g.cfg.AckWait)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		var blocked bool
		if err := g.srv.User(user).QueryRow(ctx, sqlBlocks1, user, uid).Scan(&blocked); err != nil {
			return fmt.Errorf("block of %d by %d: %w", uid, user, err)
		}
		if blocked == want || time.Now().Add(wait).After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return apierr.ErrClientGone
		case <-time.After(wait):
		}
	}
	_, err := g.blocks.load(ctx, user)
	return err
}

// handleBlocks is GET /v1/blocks: the users the caller blocks, by user id,
// limit (default DefaultBlockPage) a page.
func (g *Gateway) handleBlocks(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	after, limit, err := blockPage(r)
	if err != nil {
		return err
	}
	out, err := listBlocks(ctx, g.srv, user, after, limit)
	if err != nil {
		return err
	}
	if after == 0 && out.NextPage == nil {
		// The whole set: what the next reads of this gateway judge by.
		g.blocks.store(user, out.Blocks)
	}
	apierr.WriteJSON(w, http.StatusOK, out)
	return nil
}

// handleServerBlocks is GET /v1/server/users/{uid}/blocks (scope read):
// the users uid blocks, paged as GET /v1/blocks.
func (g *Gateway) handleServerBlocks(w http.ResponseWriter, r *http.Request) error {
	uid, err := pathID(r, "uid")
	if err != nil {
		return err
	}
	after, limit, err := blockPage(r)
	if err != nil {
		return err
	}
	out, err := listBlocks(r.Context(), g.srv, uid, after, limit)
	if err != nil {
		return err
	}
	apierr.WriteJSON(w, http.StatusOK, out)
	return nil
}

// blockPage parses limit and page (the last blocked user id of the
// previous page) of a list of blocks.
func blockPage(r *http.Request) (after, limit int64, err error) {
	q := r.URL.Query()
	if limit, err = queryInt(q, "limit", DefaultBlockPage, 1, MaxBlockPage); err != nil {
		return 0, 0, err
	}
	if after, err = queryInt(q, "page", 0, 0, math.MaxInt64); err != nil {
		return 0, 0, apierr.BadRequest("page must be a next_page of an earlier answer")
	}
	return after, limit, nil
}

// store keeps bs as user's whole set of blocks, read now.
func (c *blockCache) store(user int64, bs []protocol.Block) {
	var set inbox.Blocked
	if len(bs) > 0 {
		set = make(inbox.Blocked, len(bs))
		for _, b := range bs {
			set[b.UserID] = struct{}{}
		}
	}
	c.mu.Lock()
	c.users[user] = blockEntry{set: set, read: c.now()}
	c.mu.Unlock()
}

// listBlocks reads a page of user's blocks after blocked user id after.
func listBlocks(ctx context.Context, srv *servers.Servers, user, after, limit int64) (protocol.BlockList, error) {
	out := protocol.BlockList{Blocks: []protocol.Block{}}
	rows, _ := srv.User(user).Query(ctx, sqlBlocksPage, user, after, limit+1)
	bs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (protocol.Block, error) {
		var b protocol.Block
		err := row.Scan(&b.UserID, &b.At)
		b.At = b.At.UTC()
		return b, err
	})
	if err != nil {
		return out, fmt.Errorf("blocks of user %d: %w", user, err)
	}
	if int64(len(bs)) > limit {
		bs = bs[:limit]
		next := strconv.FormatInt(bs[limit-1].UserID, 10)
		out.NextPage = &next
	}
	if bs != nil {
		out.Blocks = bs
	}
	return out, nil
}

// refuseBlocked answers 403 when one of ids blocks actor: the blocked user
// may not start a conversation with its blocker or add it to one. Each
// user's blocks are read on its server (not the cache: a refusal is a
// write's), one statement per server.
func (g *Gateway) refuseBlocked(ctx context.Context, actor int64, ids []int64) error {
	if actor <= 0 || len(ids) == 0 {
		return nil
	}
	byServer := map[int][]int64{}
	for _, id := range ids {
		if id != actor {
			i := g.srv.OfUser(id)
			byServer[i] = append(byServer[i], id)
		}
	}
	for i, us := range byServer {
		var blocker int64
		err := g.srv.Pools[i].QueryRow(ctx, sqlBlockedBy, us, actor).Scan(&blocker)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue
		case err != nil:
			return fmt.Errorf("blocks of %d users against %d: %w", len(us), actor, err)
		}
		return apierr.Forbidden("user %d blocks you (%d)", blocker, actor)
	}
	return nil
}
