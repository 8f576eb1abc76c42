package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/apikey"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/ratelimit"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// The server API (docs/protocol.md, "Server API"): the routes under
// ServerPrefix, for the product's own back end, on API keys (package
// apikey) rather than users' tokens. Each route requires a scope, every
// call is rate-limited per key, and a request that carries an Origin
// header (a browser's) is refused before anything else.

// ServerPrefix starts every server API path.
const ServerPrefix = "/v1/server/"

// Defaults of ServerAPIConfig.
const (
	DefaultServerRate  = 100
	DefaultServerBurst = 500
)

// ServerAPIConfig configures the server API.
type ServerAPIConfig struct {
	// Rate and Burst are each API key's token bucket, spent by every
	// server API call (reads and writes alike); above it a call answers
	// 429 with Retry-After. A key is one service, so its bucket is wider
	// than a user's: defaults 100/s, burst 500.
	Rate  rate.Limit
	Burst int
}

func (c *ServerAPIConfig) setDefaults() {
	setDefault(&c.Rate, DefaultServerRate)
	setDefault(&c.Burst, DefaultServerBurst)
}

func (c *ServerAPIConfig) validate() error {
	if c.Rate < 0 || c.Burst < 1 {
		return errors.New("gateway: the server API's rate must be positive and its burst at least 1")
	}
	return nil
}

const serviceKey ctxKey = 2

// serviceFrom returns the API key of a server API request.
func serviceFrom(ctx context.Context) *apikey.Key {
	k, _ := ctx.Value(serviceKey).(*apikey.Key)
	return k
}

// serverRoutes is the server API's part of the route table. Its routes
// are not "auth" routes (a user's token is no credential there): each
// handler is wrapped by serverAuth with the scope it requires.
func (g *Gateway) serverRoutes() []route {
	s := func(method, path, scope string, h func(http.ResponseWriter, *http.Request) error) route {
		return route{method, ServerPrefix + path, false, bucketNone, g.serverAuth(scope, h)}
	}
	return []route{
		s("POST", "conversations", apikey.ScopeConversations, g.handleServerCreate),
		s("GET", "conversations/{cid}", apikey.ScopeRead, g.handleServerConversation),
		s("POST", "conversations/{cid}/members", apikey.ScopeMembers, g.handleServerAddMembers),
		s("POST", "conversations/{cid}/members/remove", apikey.ScopeMembers, g.handleServerRemoveMembers),
		s("PUT", "conversations/{cid}/members/{uid}/role", apikey.ScopeMembers, g.handleServerSetRole),
		s("PUT", "conversations/{cid}/bans/{uid}", apikey.ScopeMembers, g.handleServerSanction(events.MemberBanned)),
		s("DELETE", "conversations/{cid}/bans/{uid}", apikey.ScopeMembers, g.handleServerSanction(events.MemberUnbanned)),
		s("PUT", "conversations/{cid}/mutes/{uid}", apikey.ScopeMembers, g.handleServerSanction(events.MemberMuted)),
		s("DELETE", "conversations/{cid}/mutes/{uid}", apikey.ScopeMembers, g.handleServerSanction(events.MemberUnmuted)),
		s("GET", "conversations/{cid}/bans", apikey.ScopeRead, g.handleServerSanctions(projection.SanctionBan)),
		s("GET", "conversations/{cid}/mutes", apikey.ScopeRead, g.handleServerSanctions(projection.SanctionMute)),
		s("PATCH", "conversations/{cid}", apikey.ScopeConversations, g.handleServerUpdateConversation),
		s("POST", "conversations/{cid}/messages", apikey.ScopeMessages, g.handleServerSend),
		s("PATCH", "users/{uid}/conversations/{cid}/record", apikey.ScopeRecords, g.handleServerRecord),
		s("GET", "users/{uid}/inbox", apikey.ScopeRead, g.handleServerInbox),
		s("GET", "users/{uid}/blocks", apikey.ScopeRead, g.handleServerBlocks),
		s("GET", "reports", apikey.ScopeReports, g.handleServerReports),
		s("POST", "reports/{id}/resolve", apikey.ScopeReports, g.handleServerResolve),
		s("POST", "revocations", apikey.ScopeSessions, g.handleServerRevoke),
	}
}

// serverAuth admits a server API call: no Origin header (403: browsers
// never get in, and no CORS header is ever sent here), a valid API key
// that is not revoked (401, also for a user's token), the scope (403),
// then a token of the key's bucket (429).
func (g *Gateway) serverAuth(scope string, h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := refuseBrowser(r); err != nil {
			return err
		}
		k, err := g.serviceKey(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="inboxd-server"`)
			return err
		}
		if !k.Has(scope) {
			return apierr.Forbidden("API key %d has no scope %q", k.ID, scope)
		}
		st := g.serverLimits.Take(k.ID, time.Now())
		st.SetHeaders(w.Header())
		if !st.Allowed() {
			return st.Err()
		}
		return h(w, r.WithContext(context.WithValue(r.Context(), serviceKey, k)))
	}
}

// refuseBrowser is the server API's first rule (docs/protocol.md): a
// request with an Origin header is a 403, whatever else it is, on a
// route (serverAuth) or not (a wrong method, an unknown path:
// writeUnmatched).
func refuseBrowser(r *http.Request) error {
	if r.Header.Get("Origin") == "" {
		return nil
	}
	return apierr.Forbidden("the server API is not for browsers: a request with an Origin header is refused")
}

// onServerAPI says whether r's path is under the server API.
func onServerAPI(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, ServerPrefix) || r.URL.Path == strings.TrimSuffix(ServerPrefix, "/")
}

// serviceKey verifies the API key of r's Authorization header.
func (g *Gateway) serviceKey(r *http.Request) (*apikey.Key, error) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return nil, apierr.Unauthorized("missing API key (Authorization: Bearer ik_...)")
	}
	if !strings.HasPrefix(tok, apikey.Prefix) {
		return nil, apierr.Unauthorized("not an API key: the server API takes no user token")
	}
	k, err := apikey.Verify(r.Context(), g.pool, tok)
	switch {
	case errors.Is(err, apikey.ErrInvalid):
		return nil, &Error{Status: http.StatusUnauthorized, Code: protocol.CodeUnauthorized, Message: "invalid API key", Err: err}
	case errors.Is(err, apikey.ErrRevoked):
		return nil, &Error{Status: http.StatusUnauthorized, Code: protocol.CodeUnauthorized, Message: "API key revoked", Err: err}
	case err != nil:
		return nil, err
	}
	if err := apikey.MarkUsed(r.Context(), g.pool, k, time.Now()); err != nil {
		g.log.Warn("API key use not recorded", "key_id", k.ID, "err", err) // the call goes on
	}
	return k, nil
}

// idempotencyNS is the namespace of the ids a server API write derives
// from its Idempotency-Key.
var idempotencyNS = uuid.MustParse("6f1d9a3e-4b8c-5d2e-9f70-1a2b3c4d5e6f")

// MaxIdempotencyKey bounds the Idempotency-Key header in bytes.
const MaxIdempotencyKey = 128

// idempotencyKey is r's Idempotency-Key header, required on every server
// API write: 1..MaxIdempotencyKey bytes of printable ASCII.
func idempotencyKey(r *http.Request) (string, error) {
	v := r.Header.Get("Idempotency-Key")
	if v == "" || len(v) > MaxIdempotencyKey {
		return "", apierr.BadRequest("a server API write needs an Idempotency-Key header of 1..%d bytes", MaxIdempotencyKey)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return "", apierr.BadRequest("Idempotency-Key must be printable ASCII without spaces")
		}
	}
	return v, nil
}

// derivedID is the event id (or msg_id) a write derives from its key's
// name, the operation, its Idempotency-Key and parts (a user id): the
// same call retried makes the same event, which the projection applies
// once (by event id, msg_id). The key's name, not its id, so that a retry
// across a rotation (a new key of the same name) is still the same call.
func derivedID(k *apikey.Key, op, idem string, parts ...int64) string {
	s := fmt.Sprintf("%s\x00%s\x00%s", k.Name, op, idem)
	for _, p := range parts {
		s += fmt.Sprintf("\x00%d", p)
	}
	return uuid.NewSHA1(idempotencyNS, []byte(s)).String()
}

// replayed marks an answer as that of an earlier call with the same
// Idempotency-Key (the body is the same).
func replayed(w http.ResponseWriter) { w.Header().Set("Idempotent-Replayed", "true") }

// newServerLimits is the per-key buckets of cfg.
func newServerLimits(cfg ServerAPIConfig) *ratelimit.Limiters {
	return ratelimit.New(cfg.Rate, cfg.Burst)
}
