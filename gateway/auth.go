package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/auth"
	"github.com/inboxd/inboxd/gateway/ws"
	"github.com/inboxd/inboxd/protocol"
)

type ctxKey int

const userKey ctxKey = 1

// userFrom returns the authenticated user of ctx, 0 when none.
func userFrom(ctx context.Context) int64 {
	u, _ := ctx.Value(userKey).(int64)
	return u
}

// IssueToken signs an HS256 token for user with lifetime ttl, as the dev
// token endpoint does. Tools and tests use it; production tokens come from
// the deployment's identity service with the same claims (sub, exp).
func IssueToken(secret []byte, user int64, ttl time.Duration) (string, error) {
	return issueToken(secret, user, ttl, "", "")
}

// issueToken is IssueToken with an iss and an aud when they are not
// empty: the dev tokens carry those the gateway requires.
func issueToken(secret []byte, user int64, ttl time.Duration, iss, aud string) (string, error) {
	now := time.Now()
	claims := jwt.RegisteredClaims{
		Issuer:    iss,
		Subject:   strconv.FormatInt(user, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}
	if aud != "" {
		claims.Audience = jwt.ClaimStrings{aud}
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}

// tokenCache remembers verified tokens until their expiry, so that a
// client's token is verified (HMAC, base64, JSON claims) once rather than
// on every request. Only tokens that passed the verifier enter it, keyed by
// the whole token; a forged or altered token never matches one. A shard
// that fills up is emptied. A nil *tokenCache remembers nothing.
type tokenCache struct {
	max       int
	shards    [16]tokenShard
	hit, miss func()
}

type tokenShard struct {
	mu sync.Mutex
	m  map[string]cachedToken
}

type cachedToken = auth.Token

func newTokenCache(n int, hit, miss func()) *tokenCache {
	if n <= 0 {
		return nil
	}
	c := &tokenCache{max: max(n/16, 1), hit: hit, miss: miss}
	for i := range c.shards {
		c.shards[i].m = map[string]cachedToken{}
	}
	return c
}

func (c *tokenCache) shard(tok string) *tokenShard {
	// The signature ends the token: its last bytes are as good as a hash.
	var h byte
	if n := len(tok); n > 0 {
		h = tok[n-1] ^ tok[n/2]
	}
	return &c.shards[h%16]
}

func (c *tokenCache) get(tok string, now time.Time) (auth.Token, bool) {
	if c == nil {
		return auth.Token{}, false
	}
	sh := c.shard(tok)
	sh.mu.Lock()
	t, ok := sh.m[tok]
	if ok && !now.Before(t.Expires) {
		delete(sh.m, tok)
		ok = false
	}
	sh.mu.Unlock()
	if ok {
		c.hit()
	} else {
		c.miss()
	}
	return t, ok
}

func (c *tokenCache) put(tok string, t auth.Token) {
	if c == nil {
		return
	}
	sh := c.shard(tok)
	sh.mu.Lock()
	if len(sh.m) >= c.max {
		clear(sh.m)
	}
	sh.m[tok] = t
	sh.mu.Unlock()
}

// clear forgets every token (the key set lost a key that may have signed
// some of them).
func (c *tokenCache) clear() {
	if c == nil {
		return
	}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.mu.Unlock()
	}
}

// authenticator resolves bearer tokens: verified once (auth.Verifier: the
// shared secret or the identity provider's key set), then remembered
// (tokenCache) until their expiry or until the key set loses a key. It
// serves the API routes (bearer) and the WebSocket server (Authenticate,
// its ws.Authenticator): every token goes through resolve.
type authenticator struct {
	verifier *auth.Verifier
	tokens   *tokenCache // nil when disabled
	revoked  *revocations
}

// bearer resolves the bearer token of r's Authorization header.
func (a *authenticator) bearer(r *http.Request) (int64, error) {
	t, err := a.bearerToken(r)
	return t.User, err
}

func (a *authenticator) bearerToken(r *http.Request) (auth.Token, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return auth.Token{}, apierr.Unauthorized("missing bearer token")
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return auth.Token{}, apierr.Unauthorized("authorization is not a bearer token")
	}
	return a.resolve(r.Context(), strings.TrimSpace(tok))
}

// resolve returns the user of tok: from the cache, or verified and then
// cached. A refusal is a 401 whose message says "token expired" when that
// is the reason; a token that needs the key set before any fetch of it
// succeeded is a 503 (it may be good).
func (a *authenticator) resolve(ctx context.Context, tok string) (auth.Token, error) {
	t, ok := a.tokens.get(tok, time.Now())
	if !ok {
		var err error
		t, err = a.verifier.Verify(ctx, tok)
		switch {
		case err == nil:
			a.tokens.put(tok, t)
		case errors.Is(err, auth.ErrKeysUnavailable):
			return t, apierr.Unavailable("the identity provider's keys are not loaded yet", time.Second, err)
		case errors.Is(err, jwt.ErrTokenExpired):
			return t, &Error{Status: http.StatusUnauthorized, Code: protocol.CodeUnauthorized, Message: "token expired", Err: err}
		default:
			return t, &Error{Status: http.StatusUnauthorized, Code: protocol.CodeUnauthorized, Message: "invalid token", Err: err}
		}
	}
	// Checked on every use, cached or not: a revocation takes effect at
	// the gateway's next load of the list, whatever the cache holds.
	if a.revoked.revoked(t.User, t.ID, t.IssuedAt) {
		return t, &Error{Status: http.StatusUnauthorized, Code: protocol.CodeUnauthorized, Message: "token revoked"}
	}
	return t, nil
}

// Authenticate reads a WebSocket upgrade's token from the Authorization
// header or, for browsers, the access_token query parameter.
func (a *authenticator) Authenticate(r *http.Request) (ws.Identity, error) {
	var t auth.Token
	var err error
	if r.Header.Get("Authorization") != "" {
		t, err = a.bearerToken(r)
	} else if tok := r.URL.Query().Get("access_token"); tok != "" {
		t, err = a.resolve(r.Context(), tok)
	} else {
		err = apierr.Unauthorized("missing bearer token (Authorization header or access_token parameter)")
	}
	return ws.Identity{User: t.User, TokenID: t.ID, IssuedAt: t.IssuedAt}, err
}

// handleDevToken is POST /v1/dev/token, registered only in dev mode.
func (g *Gateway) handleDevToken(w http.ResponseWriter, r *http.Request) error {
	var req protocol.DevTokenRequest
	if err := g.decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.UserID <= 0 {
		return apierr.BadRequest("user_id must be a positive integer")
	}
	if len(g.cfg.AuthSecret) == 0 {
		// validate refuses DevMode without a secret; this is a guard.
		return apierr.Unavailable("dev tokens need an HS256 secret", time.Second, nil)
	}
	tok, err := issueToken(g.cfg.AuthSecret, req.UserID, g.cfg.DevTokenTTL, g.cfg.AuthIssuer, g.cfg.AuthAudience)
	if err != nil {
		return err
	}
	apierr.WriteJSON(w, http.StatusOK, protocol.DevToken{Token: tok, UserID: req.UserID,
		ExpiresAt: time.Now().Add(g.cfg.DevTokenTTL).UTC().Truncate(time.Second)})
	return nil
}
