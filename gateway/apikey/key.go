package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Prefix starts every key, so that a key is told from a user's token (a
// JWT) at a glance, and secret scanners can find leaked ones.
const Prefix = "ik_"

// secretBytes is the entropy of a secret: 256 bits.
const secretBytes = 32

// secretLen is the length of an encoded secret.
var secretLen = base64.RawURLEncoding.EncodedLen(secretBytes)

// MaxName bounds a key's name in bytes.
const MaxName = 64

// The scopes a key may hold; each server API route requires one.
const (
	// ScopeConversations: create conversations for users.
	ScopeConversations = "conversations"
	// ScopeMembers: add and remove members.
	ScopeMembers = "members"
	// ScopeMessages: send as a user or as a named system sender.
	ScopeMessages = "messages"
	// ScopeRecords: set a user's records (pin, mute).
	ScopeRecords = "records"
	// ScopeRead: read a user's inbox head and a conversation's state.
	ScopeRead = "read"
	// ScopeReports: read the queue of reported messages and resolve
	// reports (moderation).
	ScopeReports = "reports"
	// ScopeSessions: revoke users' tokens and sessions.
	ScopeSessions = "sessions"
)

// Scopes is every scope, in the order `apikey list` prints them.
var Scopes = []string{ScopeConversations, ScopeMembers, ScopeMessages, ScopeRecords, ScopeRead, ScopeSessions, ScopeReports}

// Key is one key's row, without its secret.
type Key struct {
	ID        int64
	Name      string
	Scopes    []string
	CreatedAt time.Time
	RevokedAt *time.Time // nil while active
	// LastUsedAt is when a call last used the key, to UsedEvery; nil if
	// never.
	LastUsedAt *time.Time
}

// Has says whether k holds scope.
func (k *Key) Has(scope string) bool { return slices.Contains(k.Scopes, scope) }

// Actor is how the events of k's calls name it (events.Event.Service):
// "<id>:<name>", stable for the key's life and readable in the log.
func (k *Key) Actor() string { return strconv.FormatInt(k.ID, 10) + ":" + k.Name }

// ErrInvalid is a credential that is not a well-formed key, or names no
// key, or whose secret does not match: the caller answers 401 and says no
// more (which of them it was would help a guesser).
var ErrInvalid = errors.New("invalid API key")

// ErrRevoked is a key that was revoked.
var ErrRevoked = errors.New("API key revoked")

// ErrNotFound is a revoke of an id that names no key.
var ErrNotFound = errors.New("no such API key")

// CheckScopes checks a key's scopes at creation: at least one, each
// known, none twice.
func CheckScopes(scopes []string) error {
	if len(scopes) == 0 {
		return fmt.Errorf("give at least one scope of %s", strings.Join(Scopes, ","))
	}
	seen := map[string]bool{}
	for _, s := range scopes {
		if !slices.Contains(Scopes, s) {
			return fmt.Errorf("unknown scope %q (scopes: %s)", s, strings.Join(Scopes, ","))
		}
		if seen[s] {
			return fmt.Errorf("scope %q given twice", s)
		}
		seen[s] = true
	}
	return nil
}

// CheckName checks a key's name: 1..MaxName bytes of printable ASCII
// without spaces or colons (it is the part of Actor after the id).
func CheckName(name string) error {
	if name == "" || len(name) > MaxName {
		return fmt.Errorf("a key's name must be 1..%d bytes", MaxName)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return fmt.Errorf("a key's name is printable ASCII without spaces or ':', not %q", name)
		}
	}
	return nil
}

// newSecret returns a fresh secret, encoded, and its hash.
func newSecret() (string, []byte, error) {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", nil, fmt.Errorf("random secret: %w", err)
	}
	s := base64.RawURLEncoding.EncodeToString(b)
	return s, hash(s), nil
}

func hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// format is the key a client presents.
func format(id int64, secret string) string {
	return Prefix + strconv.FormatInt(id, 10) + "_" + secret
}

// Parse splits a presented key into its id and secret; any other string
// is ErrInvalid.
func Parse(raw string) (id int64, secret string, err error) {
	rest, ok := strings.CutPrefix(raw, Prefix)
	if !ok {
		return 0, "", ErrInvalid
	}
	ids, secret, ok := strings.Cut(rest, "_") // the secret may hold '_': the id ends at the first
	if !ok || len(secret) != secretLen {
		return 0, "", ErrInvalid
	}
	id, err = strconv.ParseInt(ids, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != ids {
		return 0, "", ErrInvalid
	}
	if _, err := base64.RawURLEncoding.Strict().DecodeString(secret); err != nil {
		return 0, "", ErrInvalid
	}
	return id, secret, nil
}
