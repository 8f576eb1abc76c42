package importer

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The checkpoint of a file (by source and content hash): every line below
// next_line is acknowledged by the log, so a run killed after it resumes
// there. Lines at or above it that the killed run had appended are
// appended again and projected once (their ids are derived).
const (
	sqlLoadCheckpoint = `SELECT next_line, done FROM import_checkpoints WHERE source = $1 AND file_sha256 = $2`
	sqlSaveCheckpoint = `INSERT INTO import_checkpoints (source, file_sha256, next_line, done) VALUES ($1, $2, $3, $4)
ON CONFLICT (source, file_sha256) DO UPDATE SET next_line = excluded.next_line, done = excluded.done, updated_at = now()`
)

// checkpoint is where a file's import stands.
type checkpoint struct {
	next int64 // first line not yet acknowledged (lines count from 1)
	done bool
}

func loadCheckpoint(ctx context.Context, pool *pgxpool.Pool, source, sum string) (checkpoint, error) {
	cp := checkpoint{next: 1}
	err := pool.QueryRow(ctx, sqlLoadCheckpoint, source, sum).Scan(&cp.next, &cp.done)
	if errors.Is(err, pgx.ErrNoRows) {
		return checkpoint{next: 1}, nil
	}
	if err != nil {
		return cp, fmt.Errorf("load checkpoint of source %q file %s: %w", source, sum, err)
	}
	return cp, nil
}

func saveCheckpoint(ctx context.Context, pool *pgxpool.Pool, source, sum string, cp checkpoint) error {
	if _, err := pool.Exec(ctx, sqlSaveCheckpoint, source, sum, cp.next, cp.done); err != nil {
		return fmt.Errorf("save checkpoint of source %q file %s at line %d: %w", source, sum, cp.next, err)
	}
	return nil
}
