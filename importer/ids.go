package importer

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// namespace is the UUIDv5 namespace of every id an import derives; a
// source's own namespace is derived from it and the source's name.
var namespace = uuid.MustParse("6f1d3c52-8a47-4e0b-9d1e-2b7a0c9f4e31")

// sourceNS is the namespace of the ids of one source.
func sourceNS(source string) uuid.UUID { return uuid.NewSHA1(namespace, []byte(source)) }

// derive is the UUIDv5 of parts (joined by NUL, which no external id may
// hold) in ns: the same external ids give the same event ids and msg_ids in
// every run, which is what makes a second run change nothing (the
// projector applies an event id, and a msg_id, at most once).
func derive(ns uuid.UUID, parts ...string) string {
	return uuid.NewSHA1(ns, []byte(strings.Join(parts, "\x00"))).String()
}

// sqlAssignIDs gives each external conversation id of a source that has
// none an id from the conversation_ids sequence (the gateway's, so that no
// id is ever given twice); sqlMappedIDs reads them all back.
const (
	sqlAssignIDs = `INSERT INTO import_conversations (source, external_id, conversation_id)
SELECT $1, x, nextval('conversation_ids') FROM unnest($2::text[]) AS x
WHERE NOT EXISTS (SELECT 1 FROM import_conversations i WHERE i.source = $1 AND i.external_id = x)
ON CONFLICT DO NOTHING`
	sqlMappedIDs = `SELECT external_id, conversation_id FROM import_conversations WHERE source = $1 AND external_id = ANY($2::text[])`
)

// assignChunk is how many external ids one statement maps.
const assignChunk = 5000

// assignIDs returns the inboxd conversation id of each of ext, assigning
// those that have none. A second run, or a resumed one, gets the ids of
// the first.
func assignIDs(ctx context.Context, pool *pgxpool.Pool, source string, ext []string) (map[string]int64, error) {
	out := make(map[string]int64, len(ext))
	for i := 0; i < len(ext); i += assignChunk {
		chunk := ext[i:min(i+assignChunk, len(ext))]
		if _, err := pool.Exec(ctx, sqlAssignIDs, source, chunk); err != nil {
			return nil, fmt.Errorf("assign conversation ids of source %q: %w", source, err)
		}
		rows, err := pool.Query(ctx, sqlMappedIDs, source, chunk)
		if err != nil {
			return nil, fmt.Errorf("read conversation ids of source %q: %w", source, err)
		}
		for rows.Next() {
			var e string
			var id int64
			if err := rows.Scan(&e, &id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("read conversation ids of source %q: %w", source, err)
			}
			out[e] = id
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("read conversation ids of source %q: %w", source, err)
		}
	}
	if len(out) != len(ext) {
		return nil, fmt.Errorf("source %q: %d of %d conversations have an id", source, len(out), len(ext))
	}
	return out, nil
}
