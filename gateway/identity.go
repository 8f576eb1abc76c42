package gateway

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/gateway/internal/auth"
)

// newAuthenticator builds the token verifier of g's Config (the HS256
// secret, the identity provider's key set, or both), its metrics, and the
// cache of verified tokens, which is emptied whenever the key set loses a
// key so that a removed key stops verifying at once.
func (g *Gateway) newAuthenticator() (*authenticator, error) {
	cfg, m := g.cfg, g.metrics
	fetches := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "inboxd", Subsystem: "gateway", Name: "jwks_fetches_total",
		Help: "Fetches of the identity provider's key set (AuthJWKSURL) by result (ok, error); a failed fetch keeps the last good set.",
	}, []string{"result"})
	keys := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "inboxd", Subsystem: "gateway", Name: "jwks_keys",
		Help: "Usable keys of the identity provider's key set held.",
	})
	lastOK := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "inboxd", Subsystem: "gateway", Name: "jwks_last_success_timestamp_seconds",
		Help: "Unix time of the last successful fetch of the key set (0: none yet).",
	})
	if cfg.AuthJWKSURL != "" {
		for _, c := range []prometheus.Collector{fetches, keys, lastOK} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("gateway: register JWKS metrics: %w", err)
			}
		}
		fetches.WithLabelValues("ok")
		fetches.WithLabelValues("error")
	}
	a := &authenticator{revoked: newRevocations(), tokens: newTokenCache(cfg.TokenCache,
		m.cache.WithLabelValues("tokens", "hit").Inc, m.cache.WithLabelValues("tokens", "miss").Inc)}
	v, err := auth.New(auth.Config{
		Secret: cfg.AuthSecret, JWKSURL: cfg.AuthJWKSURL,
		JWKSRefresh: cfg.AuthJWKSRefresh, JWKSMinRefresh: cfg.AuthJWKSMinRefresh,
		Issuer: cfg.AuthIssuer, Audience: cfg.AuthAudience, Leeway: cfg.AuthLeeway, UserClaim: cfg.AuthUserClaim,
		Fetched: func(err error, n int) {
			keys.Set(float64(n))
			if err != nil {
				fetches.WithLabelValues("error").Inc()
				return
			}
			fetches.WithLabelValues("ok").Inc()
			lastOK.Set(float64(time.Now().Unix()))
		},
		KeysRemoved: a.tokens.clear,
		Logger:      cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	a.verifier = v
	return a, nil
}
