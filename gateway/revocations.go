package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/ws"
	"github.com/inboxd/inboxd/protocol"
)

// Revocations (docs/protocol.md, "Server API"): a deployment revokes a
// stolen token by its id (jti), a user's tokens issued before a time (the
// user's sessions, "log out everywhere"), or everyone's issued before a
// time (a signing key that leaked). The catalog server keeps them in the
// revocations table, append-only; every gateway holds the whole list in
// memory, reads what was added every RevocationPoll (250 ms by default),
// checks each request's token against it (cached tokens too), and closes
// the WebSocket sessions of revoked tokens with 4001. A revocation so
// takes effect on every gateway within a poll and a query.

// DefaultRevocationPoll is how often a gateway reads new revocations.
const DefaultRevocationPoll = 250 * time.Millisecond

// revocations is a gateway's copy of the revocations table.
type revocations struct {
	mu     sync.RWMutex
	tokens map[string]struct{} // revoked token ids
	before map[int64]time.Time // per user (0: everyone), tokens issued before it are revoked
	seen   map[int64]struct{}  // the rows read (the recent ones are read again)
	last   int64               // the highest row id read
	loaded bool
	wss    []*ws.Server // the WebSocket endpoints whose sessions closeRevoked closes
}

// watch adds a WebSocket endpoint whose sessions of revoked tokens are
// closed.
func (r *revocations) watch(s *ws.Server) {
	r.mu.Lock()
	r.wss = append(r.wss, s)
	r.mu.Unlock()
}

// closeRevoked closes the sessions of revoked tokens on every endpoint
// and returns how many.
func (r *revocations) closeRevoked() int {
	r.mu.RLock()
	wss := slices.Clone(r.wss)
	r.mu.RUnlock()
	n := 0
	for _, s := range wss {
		n += s.CloseRevoked(r.revokedSession)
	}
	return n
}

func newRevocations() *revocations {
	return &revocations{tokens: map[string]struct{}{}, before: map[int64]time.Time{}, seen: map[int64]struct{}{}}
}

// revoked says whether the token of user with id and iat (each zero when
// the token has none) is revoked. A token without iat is revoked by any
// "issued before" that applies to it: when it was issued is unknown. A
// nil *revocations revokes nothing.
func (r *revocations) revoked(user int64, id string, iat time.Time) bool {
	if r == nil {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if _, ok := r.tokens[id]; ok && id != "" {
		return true
	}
	for _, u := range [2]int64{0, user} {
		if t, ok := r.before[u]; ok && (iat.IsZero() || iat.Before(t)) {
			return true
		}
	}
	return false
}

// revokedSession is revoked for a WebSocket session's identity.
func (r *revocations) revokedSession(who ws.Identity) bool {
	return r.revoked(who.User, who.TokenID, who.IssuedAt)
}

// sqlRevocationsAfter reads the rows after the last one read, and again
// those of the last minute: a row whose transaction committed after a
// later id's was read is not missed (ids are taken before commit).
const sqlRevocationsAfter = `SELECT id, COALESCE(user_id, 0), COALESCE(token_id, ''), issued_before
FROM revocations WHERE id > $1 OR created_at > now() - interval '1 minute' ORDER BY id`

// load reads the revocations added since the last load and returns how
// many were new.
func (r *revocations) load(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) (int, error) {
	r.mu.RLock()
	last := r.last
	r.mu.RUnlock()
	rows, err := q.Query(ctx, sqlRevocationsAfter, last)
	if err != nil {
		return 0, fmt.Errorf("read revocations: %w", err)
	}
	type row struct {
		id, user int64
		token    string
		before   *time.Time
	}
	var got []row
	var x row
	if _, err := pgx.ForEachRow(rows, []any{&x.id, &x.user, &x.token, &x.before}, func() error {
		got = append(got, x)
		return nil
	}); err != nil {
		return 0, fmt.Errorf("read revocations: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, x := range got {
		if _, ok := r.seen[x.id]; ok {
			continue
		}
		r.seen[x.id] = struct{}{}
		r.last = max(r.last, x.id)
		n++
		if x.token != "" {
			r.tokens[x.token] = struct{}{}
			continue
		}
		if x.before != nil && x.before.After(r.before[x.user]) {
			r.before[x.user] = *x.before
		}
	}
	r.loaded = true
	return n, nil
}

// runRevocations loads the revocations every RevocationPoll until ctx
// ends, and closes the sessions of tokens newly revoked.
func (g *Gateway) runRevocations(ctx context.Context) error {
	round := func() {
		n, err := g.auth.revoked.load(ctx, g.srv.Catalog())
		if err != nil {
			if ctx.Err() == nil {
				g.metrics.revocationLoads.WithLabelValues("error").Inc()
				g.log.Warn("reading revocations failed; trying again", "err", err)
			}
			return
		}
		g.metrics.revocationLoads.WithLabelValues("ok").Inc()
		if n > 0 {
			closed := g.auth.revoked.closeRevoked()
			g.log.Info("revocations loaded", "new", n, "sessions_closed", closed)
		}
	}
	round()
	every(ctx, g.cfg.RevocationPoll, round)
	return nil
}

const sqlRevoke = `INSERT INTO revocations (user_id, token_id, issued_before)
VALUES (NULLIF($1, 0), NULLIF($2, ''), $3)
RETURNING id, created_at`

// maxTokenID bounds a revoked token id, in bytes.
const maxTokenID = 256

// handleServerRevoke is POST /v1/server/revocations: revoke a token by its
// id, a user's tokens issued before a time (now by default), or, with no
// user, everyone's issued before a time.
func (g *Gateway) handleServerRevoke(w http.ResponseWriter, r *http.Request) error {
	var req protocol.Revocation
	if err := g.decodeBody(w, r, &req); err != nil {
		return err
	}
	switch {
	case req.UserID < 0:
		return apierr.BadRequest("user_id must be a positive integer")
	case len(req.TokenID) > maxTokenID:
		return apierr.BadRequest("token_id is over %d bytes", maxTokenID)
	case strings.ContainsFunc(req.TokenID, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return apierr.BadRequest("token_id must not hold control characters")
	case req.TokenID != "" && req.IssuedBefore != nil:
		return apierr.BadRequest("give token_id or issued_before, not both")
	case req.TokenID == "" && req.UserID == 0 && req.IssuedBefore == nil:
		return apierr.BadRequest("give token_id, user_id or issued_before")
	}
	var before *time.Time
	if req.TokenID == "" {
		t := time.Now().UTC()
		if req.IssuedBefore != nil {
			t = req.IssuedBefore.UTC()
		}
		before = &t
	}
	out := protocol.Revocation{UserID: req.UserID, TokenID: req.TokenID, IssuedBefore: before}
	err := g.srv.Catalog().QueryRow(r.Context(), sqlRevoke, req.UserID, req.TokenID, before).Scan(&out.ID, &out.CreatedAt)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return err
		}
		return fmt.Errorf("store revocation: %w", err)
	}
	out.CreatedAt = out.CreatedAt.UTC()
	// This gateway need not wait for its next poll.
	if _, err := g.auth.revoked.load(r.Context(), g.srv.Catalog()); err == nil {
		g.auth.revoked.closeRevoked()
	}
	apierr.WriteJSON(w, http.StatusCreated, out)
	return nil
}
