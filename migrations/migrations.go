// Package migrations owns the PostgreSQL schema of the projections. The SQL
// files are embedded in the binary and applied with pressly/goose under a
// PostgreSQL advisory lock, so several processes starting at once (two fanouts,
// a gateway) apply them exactly once.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// Up applies every pending migration to the database of pool.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return UpDB(ctx, db)
}

// UpDB is Up for a database/sql handle.
func UpDB(ctx context.Context, db *sql.DB) error {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("migration locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("migration provider: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}

// SetSearchConfig makes cfg (a PostgreSQL text search configuration, such
// as simple or english) the one messages are indexed and searched with,
// and recomputes the index of every message in the same transaction
// (docs/protocol.md, "GET /v1/search"). It reports how many messages it
// reindexed: none when cfg is the configuration already.
func SetSearchConfig(ctx context.Context, pool *pgxpool.Pool, cfg string) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var want *string
		var have, def string
		// A name ($1::regconfig would fail the transaction on an unknown
		// one), optionally schema-qualified.
		if err := tx.QueryRow(ctx, `SELECT (SELECT c.oid::regconfig::text FROM pg_ts_config c JOIN pg_namespace n ON n.oid = c.cfgnamespace
WHERE c.cfgname = coalesce(substring($1 from '\.(.*)$'), $1) AND (strpos($1, '.') = 0 OR n.nspname = split_part($1, '.', 1))
ORDER BY n.nspname = 'pg_catalog' DESC LIMIT 1), inboxd_search.config()::text`, cfg).Scan(&want, &have); err != nil {
			return fmt.Errorf("search configuration: %w", err)
		}
		if want == nil {
			return fmt.Errorf("no text search configuration %q in this database (psql: \\dF)", cfg)
		}
		if *want == have {
			return nil
		}
		if err := tx.QueryRow(ctx, `SELECT format('CREATE OR REPLACE FUNCTION inboxd_search.config() RETURNS regconfig
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L', format('SELECT %L::regconfig', $1::text))`, *want).Scan(&def); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, def); err != nil {
			return fmt.Errorf("set search configuration %s: %w", *want, err)
		}
		// An update recomputes the row's generated search_vector.
		tag, err := tx.Exec(ctx, `UPDATE messages SET body = body WHERE kind = 'text' AND NOT deleted`)
		if err != nil {
			return fmt.Errorf("reindex messages: %w", err)
		}
		n = tag.RowsAffected()
		return nil
	})
	return n, err
}
