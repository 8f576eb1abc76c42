package auth

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

// Defaults of Config.
const (
	// DefaultJWKSRefresh is how often the key set is fetched again, so
	// that a key the provider removed stops verifying within it.
	DefaultJWKSRefresh = 5 * time.Minute
	// DefaultJWKSMinRefresh is the floor between two fetches: a token
	// with an unknown kid makes at most one fetch per interval, however
	// many such tokens arrive.
	DefaultJWKSMinRefresh = 10 * time.Second
	// DefaultJWKSTimeout bounds one fetch of the key set.
	DefaultJWKSTimeout = 10 * time.Second
	// DefaultUserClaim is the claim holding the user id.
	DefaultUserClaim = "sub"
	// maxJWKSBytes bounds a key set document.
	maxJWKSBytes = 1 << 20
)

// Config configures a Verifier. The zero value of every field means its
// default; at least one of Secret and JWKSURL must be set.
type Config struct {
	// Secret is the HS256 key. Empty: HS256 tokens are refused (a
	// JWKS-only deployment). It is never taken from the key set.
	Secret []byte

	// JWKSURL is the http(s) URL of the provider's JSON Web Key Set.
	// Empty: only HS256. RSA (RS256), EC P-256 (ES256) and OKP Ed25519
	// (EdDSA) keys with a kid are used; other keys (oct, other curves or
	// algorithms, use other than sig) are skipped.
	JWKSURL string

	// JWKSRefresh is the period of the background fetch. Default 5m.
	JWKSRefresh time.Duration

	// JWKSMinRefresh is the least time between two fetches (the start of
	// one and the start of the next): a token with an unknown kid waits
	// for the next fetch allowed, at most this long. Default 10s.
	JWKSMinRefresh time.Duration

	// HTTPClient fetches the key set. Default: a client with a
	// DefaultJWKSTimeout timeout.
	HTTPClient *http.Client

	// Issuer, when set, is the required iss of every token (HS256 ones
	// too). Default: iss is not checked.
	Issuer string

	// Audience, when set, must be in the token's aud (a string or a list).
	// Default: aud is not checked.
	Audience string

	// Leeway is the clock skew allowed on exp, nbf and iat. Default 0.
	Leeway time.Duration

	// UserClaim names the claim holding the user id: a positive decimal
	// string without leading zeros; a claim other than sub may also be a
	// JSON integer. Default "sub".
	UserClaim string

	// Fetched, when set, is called after every fetch of the key set with
	// its error (nil on success) and the number of usable keys held.
	Fetched func(err error, keys int)

	// KeysRemoved, when set, is called when a fetch removed a key, so
	// that tokens verified with it and remembered elsewhere are
	// forgotten.
	KeysRemoved func()

	// Logger. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.JWKSRefresh == 0 {
		c.JWKSRefresh = DefaultJWKSRefresh
	}
	if c.JWKSMinRefresh == 0 {
		c.JWKSMinRefresh = DefaultJWKSMinRefresh
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: DefaultJWKSTimeout}
	}
	if c.UserClaim == "" {
		c.UserClaim = DefaultUserClaim
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	switch {
	case len(c.Secret) == 0 && c.JWKSURL == "":
		return errors.New("auth: set an HS256 secret, a JWKS URL or both")
	case c.JWKSRefresh < 0 || c.JWKSMinRefresh < 0 || c.Leeway < 0:
		return errors.New("auth: durations must not be negative")
	case c.JWKSMinRefresh > c.JWKSRefresh:
		return fmt.Errorf("auth: JWKS min refresh %v above the refresh period %v", c.JWKSMinRefresh, c.JWKSRefresh)
	}
	if c.JWKSURL != "" {
		u, err := url.Parse(c.JWKSURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("auth: JWKS URL %q is not an http(s) URL", c.JWKSURL)
		}
	}
	return nil
}
