package auth

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrUnknownKey refuses a token whose kid is not in the key set, even
	// after the fetch it caused.
	ErrUnknownKey = errors.New("unknown signing key")
	// ErrKeysUnavailable refuses a token that needs the key set while no
	// fetch of it has succeeded yet: the token may be good, the gateway
	// cannot tell (the gateway answers 503, not 401).
	ErrKeysUnavailable = errors.New("the key set has not been fetched yet")
)

// keySet holds the last good key set of a JWKS URL. Reads are lock-free;
// one goroutine (run) fetches: periodically, and when a token names an
// unknown kid (want), never twice within minRefresh.
type keySet struct {
	cfg  *Config
	keys atomic.Pointer[map[string]publicKey] // nil until a fetch succeeded

	// want asks run for a fetch; buffered so that a storm of unknown kids
	// makes one request.
	want chan struct{}

	mu        sync.Mutex
	next      chan struct{} // closed when the next fetch to start has ended
	lastErr   error         // of the last fetch
	lastStart time.Time     // of the last fetch; read and written by run only
}

func newKeySet(cfg *Config) *keySet {
	return &keySet{cfg: cfg, want: make(chan struct{}, 1), next: make(chan struct{})}
}

func (s *keySet) lookup(kid string) (publicKey, bool) {
	m := s.keys.Load()
	if m == nil {
		return publicKey{}, false
	}
	k, ok := (*m)[kid]
	return k, ok
}

// key returns the key of kid. An unknown kid waits for the next fetch that
// starts after this call (shared with every other caller waiting, and at
// most MinRefresh after the previous fetch), then looks again.
func (s *keySet) key(ctx context.Context, kid string) (publicKey, error) {
	if k, ok := s.lookup(kid); ok {
		return k, nil
	}
	s.mu.Lock()
	done := s.next
	s.mu.Unlock()
	select {
	case s.want <- struct{}{}:
	default:
	}
	// The bound only matters when run is not running (it fetches within
	// MinRefresh and a fetch timeout of a request).
	t := time.NewTimer(s.cfg.JWKSMinRefresh + DefaultJWKSTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
		return publicKey{}, fmt.Errorf("wait for the key set: %w", ctx.Err())
	}
	if k, ok := s.lookup(kid); ok {
		return k, nil
	}
	if s.keys.Load() == nil {
		return publicKey{}, ErrKeysUnavailable
	}
	return publicKey{}, fmt.Errorf("%w: kid %q", ErrUnknownKey, kid)
}

// ready is nil once a fetch succeeded, else the reason.
func (s *keySet) ready() error {
	if s.keys.Load() != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastErr != nil {
		return fmt.Errorf("no key set yet: %w", s.lastErr)
	}
	return ErrKeysUnavailable
}

// run fetches the key set at once, then every JWKSRefresh (every
// JWKSMinRefresh while fetches fail) and when a caller wants it, keeping
// JWKSMinRefresh between the starts of two fetches, until ctx ends.
func (s *keySet) run(ctx context.Context) error {
	for {
		wait := s.cfg.JWKSRefresh
		if err := s.fetch(ctx); err != nil {
			wait = s.cfg.JWKSMinRefresh
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		case <-s.want:
			timer.Stop()
			floor := time.NewTimer(time.Until(s.lastStart.Add(s.cfg.JWKSMinRefresh)))
			select {
			case <-ctx.Done():
				floor.Stop()
				return nil
			case <-floor.C:
			}
		}
	}
}

// fetch gets the key set once and keeps it when it is good; the callers
// waiting for this fetch are released when it ends.
func (s *keySet) fetch(ctx context.Context) error {
	s.mu.Lock()
	done := s.next
	s.next = make(chan struct{})
	s.lastStart = time.Now()
	s.mu.Unlock()
	defer close(done)

	keys, skipped, err := s.get(ctx)
	n := 0
	if err == nil {
		old := s.keys.Swap(&keys)
		n = len(keys)
		s.logChange(old, keys, skipped)
	} else if m := s.keys.Load(); m != nil {
		n = len(*m)
	}
	if err != nil && ctx.Err() == nil {
		s.cfg.Logger.Warn("JWKS fetch failed; keeping the last good key set", "url", s.cfg.JWKSURL, "keys", n, "err", err)
	}
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
	if s.cfg.Fetched != nil && ctx.Err() == nil {
		s.cfg.Fetched(err, n)
	}
	return err
}

// get is one GET of the key set and its parse.
func (s *keySet) get(ctx context.Context) (map[string]publicKey, []string, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultJWKSTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.JWKSURL, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("fetch JWKS %s: %w", s.cfg.JWKSURL, err)
	}
	req.Header.Set("Accept", "application/json")
	res, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("fetch JWKS %s: %w", s.cfg.JWKSURL, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("fetch JWKS %s: status %s", s.cfg.JWKSURL, res.Status)
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read JWKS %s: %w", s.cfg.JWKSURL, err)
	}
	if len(b) > maxJWKSBytes {
		return nil, nil, fmt.Errorf("JWKS %s over %d bytes", s.cfg.JWKSURL, maxJWKSBytes)
	}
	keys, skipped, err := parseJWKS(b)
	if err != nil {
		return nil, nil, fmt.Errorf("JWKS %s: %w", s.cfg.JWKSURL, err)
	}
	return keys, skipped, nil
}

// logChange logs a key set that differs from the one held, and calls
// KeysRemoved when a key left it (or changed under its kid).
func (s *keySet) logChange(old *map[string]publicKey, keys map[string]publicKey, skipped []string) {
	added, removed := 0, 0
	if old != nil {
		for kid, k := range *old {
			if nk, ok := keys[kid]; !ok || nk.alg != k.alg || !sameKey(nk.key, k.key) {
				removed++
			}
		}
	}
	for kid := range keys {
		if old == nil {
			added++
		} else if _, ok := (*old)[kid]; !ok {
			added++
		}
	}
	if added == 0 && removed == 0 {
		return
	}
	s.cfg.Logger.Info("JWKS key set changed", "url", s.cfg.JWKSURL, "keys", len(keys),
		"added", added, "removed", removed, "skipped", skipped)
	if removed > 0 && s.cfg.KeysRemoved != nil {
		s.cfg.KeysRemoved()
	}
}

func sameKey(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}
