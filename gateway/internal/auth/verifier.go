package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Verifier verifies bearer tokens. Create it with New; with a JWKS URL,
// Run must run for the key set to be fetched. It is safe for concurrent
// use.
type Verifier struct {
	cfg    Config
	parser *jwt.Parser
	keys   *keySet // nil without a JWKS URL
}

// New returns a Verifier of cfg, or the reason cfg is invalid.
func New(cfg Config) (*Verifier, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var algs []string
	if len(cfg.Secret) > 0 {
		algs = append(algs, jwt.SigningMethodHS256.Alg())
	}
	if cfg.JWKSURL != "" {
		algs = append(algs, jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg(), jwt.SigningMethodEdDSA.Alg())
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(algs), jwt.WithExpirationRequired(),
		jwt.WithJSONNumber(), jwt.WithLeeway(cfg.Leeway)}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v := &Verifier{cfg: cfg, parser: jwt.NewParser(opts...)}
	if cfg.JWKSURL != "" {
		v.keys = newKeySet(&v.cfg)
	}
	return v, nil
}

// Run fetches the key set (at once, periodically and when a token names
// an unknown kid) until ctx ends; it returns nil then. Without a JWKS URL
// it only waits for ctx. A failed fetch is logged and reported to
// Config.Fetched; the last good set stays in use.
func (v *Verifier) Run(ctx context.Context) error {
	if v.keys == nil {
		<-ctx.Done()
		return nil
	}
	return v.keys.run(ctx)
}

// Ready is nil when tokens of every configured kind can be verified: no
// JWKS URL, or a key set fetched. Otherwise it says why not.
func (v *Verifier) Ready() error {
	if v.keys == nil {
		return nil
	}
	return v.keys.ready()
}

// Verify returns what a valid token says (Token). An invalid
// one is an error wrapping jwt's (jwt.ErrTokenExpired for an expired one),
// ErrTokenJSON, ErrUnknownKey, or ErrKeysUnavailable (the token needs the
// key set and none was fetched yet). A token with an unknown kid waits
// for a fetch of the key set (at most JWKSMinRefresh) or for ctx.
func (v *Verifier) Verify(ctx context.Context, raw string) (Token, error) {
	var t Token
	if err := checkTokenJSON(raw); err != nil {
		return t, err
	}
	tok, err := v.parser.ParseWithClaims(raw, jwt.MapClaims{}, func(t *jwt.Token) (any, error) { return v.key(ctx, t) })
	if err != nil {
		return t, err
	}
	claims, ok := tok.Claims.(jwt.MapClaims)
	if !ok {
		return t, errors.New("claims are not an object")
	}
	if t.User, err = v.userID(claims); err != nil {
		return t, err
	}
	e, err := claims.GetExpirationTime()
	if err != nil || e == nil {
		return t, errors.New("no exp") // the parser required it
	}
	t.Expires = e.Time
	// jti and iat are optional; revocations use them when present.
	if id, ok := claims["jti"].(string); ok {
		t.ID = id
	}
	if iat, err := claims.GetIssuedAt(); err == nil && iat != nil {
		t.IssuedAt = iat.Time
	}
	return t, nil
}

// Token is what a verified token says of itself: its user, its expiry,
// and, when it carries them, its id (jti) and when it was issued (iat),
// which revocations name.
type Token struct {
	User     int64
	Expires  time.Time
	ID       string
	IssuedAt time.Time
}

// key is the verification key of t. The parser has already refused an
// alg not configured (none, HS512, PS256, HS256 without a secret); the
// key named by kid must be of the type of t's alg, so that a public key
// never verifies another algorithm than its own (an RSA key is never an
// HMAC secret: HS256 only ever uses Config.Secret).
func (v *Verifier) key(ctx context.Context, t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	if alg == jwt.SigningMethodHS256.Alg() {
		return v.cfg.Secret, nil
	}
	kid, _ := t.Header["kid"].(string)
	if kid == "" {
		return nil, fmt.Errorf("%s token without a kid", alg)
	}
	k, err := v.keys.key(ctx, kid)
	if err != nil {
		return nil, err
	}
	if k.alg != alg {
		return nil, fmt.Errorf("alg %s with kid %q, a key for %s", alg, kid, k.alg)
	}
	return k.key, nil
}

// userID reads the user id claim: a positive decimal string without
// leading zeros or sign ("42"); in a claim other than sub, a JSON integer
// (42) too, as identity providers' claim mappers often write numbers.
func (v *Verifier) userID(claims jwt.MapClaims) (int64, error) {
	name := v.cfg.UserClaim
	var s string
	switch x := claims[name].(type) {
	case string:
		s = x
	case json.Number:
		if name == "sub" {
			return 0, errors.New("sub is not a string")
		}
		s = x.String()
	default:
		return 0, fmt.Errorf("%s is not a user id", name)
	}
	u, err := strconv.ParseInt(s, 10, 64)
	if err != nil || u <= 0 || strconv.FormatInt(u, 10) != s {
		return 0, fmt.Errorf("%s is not a user id", name)
	}
	return u, nil
}
