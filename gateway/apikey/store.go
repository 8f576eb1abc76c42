package apikey

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what the store needs of PostgreSQL (a *pgxpool.Pool).
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const sqlCreate = `INSERT INTO api_keys (name, scopes, hash) VALUES ($1, $2, $3) RETURNING id, created_at`

// Create makes an active key named name with scopes and returns it with
// the key to hand to the service: shown this once, stored only hashed.
// Several keys may be active at once (also under one name): a rotation
// creates the new key, moves the service to it, then revokes the old.
func Create(ctx context.Context, db Querier, name string, scopes []string) (*Key, string, error) {
	if err := CheckName(name); err != nil {
		return nil, "", err
	}
	if err := CheckScopes(scopes); err != nil {
		return nil, "", err
	}
	secret, h, err := newSecret()
	if err != nil {
		return nil, "", err
	}
	k := &Key{Name: name, Scopes: scopes}
	if err := db.QueryRow(ctx, sqlCreate, name, scopes, h).Scan(&k.ID, &k.CreatedAt); err != nil {
		return nil, "", fmt.Errorf("create API key %q: %w", name, err)
	}
	return k, format(k.ID, secret), nil
}

const sqlList = `SELECT id, name, scopes, created_at, revoked_at, last_used_at FROM api_keys ORDER BY id`

// List returns every key, revoked ones too, in id order.
func List(ctx context.Context, db Querier) ([]Key, error) {
	rows, err := db.Query(ctx, sqlList)
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	ks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Key, error) {
		var k Key
		err := r.Scan(&k.ID, &k.Name, &k.Scopes, &k.CreatedAt, &k.RevokedAt, &k.LastUsedAt)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	return ks, nil
}

const sqlRevoke = `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 RETURNING revoked_at`

// Revoke revokes key id; the next call with it, on any gateway, is
// refused. Revoking a revoked key changes nothing (its time stays).
func Revoke(ctx context.Context, db Querier, id int64) (time.Time, error) {
	var at time.Time
	err := db.QueryRow(ctx, sqlRevoke, id).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return at, fmt.Errorf("revoke API key %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return at, fmt.Errorf("revoke API key %d: %w", id, err)
	}
	return at, nil
}

const sqlVerify = `SELECT name, scopes, hash, created_at, revoked_at, last_used_at FROM api_keys WHERE id = $1`

// Verify returns the key raw presents: ErrInvalid unless it is well
// formed, names a key and its secret matches; ErrRevoked for a revoked
// key; another error when the read failed. It reads the row each time
// (see the package doc).
func Verify(ctx context.Context, db Querier, raw string) (*Key, error) {
	id, secret, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	k := &Key{ID: id}
	var h []byte
	err = db.QueryRow(ctx, sqlVerify, id).Scan(&k.Name, &k.Scopes, &h, &k.CreatedAt, &k.RevokedAt, &k.LastUsedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrInvalid
	}
	if err != nil {
		return nil, fmt.Errorf("read API key %d: %w", id, err)
	}
	if subtle.ConstantTimeCompare(h, hash(secret)) != 1 {
		return nil, ErrInvalid
	}
	if k.RevokedAt != nil {
		return nil, ErrRevoked
	}
	return k, nil
}

// UsedEvery is how often a key's last_used_at is written at most: a key
// used a thousand times a second costs one write a minute, and an
// operator still sees when a key went idle (a rotation's old key).
const UsedEvery = time.Minute

const sqlUsed = `UPDATE api_keys SET last_used_at = now()
WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - $2::interval)`

// MarkUsed records that k was used now, unless Verify found it used
// within UsedEvery (then it writes nothing). The conditional UPDATE keeps
// concurrent gateways to about one write per UsedEvery.
func MarkUsed(ctx context.Context, db Querier, k *Key, now time.Time) error {
	if k.LastUsedAt != nil && now.Sub(*k.LastUsedAt) < UsedEvery {
		return nil
	}
	if _, err := db.Exec(ctx, sqlUsed, k.ID, UsedEvery); err != nil {
		return fmt.Errorf("mark API key %d used: %w", k.ID, err)
	}
	return nil
}
