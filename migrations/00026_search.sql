-- +goose Up
-- Message search (docs/protocol.md, "GET /v1/search"). The index is a
-- column PostgreSQL computes whenever the projection writes a message row,
-- so it is never behind the row and a delete takes it in the same
-- transaction. NULL for a deleted or system message: never found.
--
-- Its functions live in a schema of their own, made once per database:
-- a replay migrates a shadow schema and drops it after the swap, which
-- must take neither the functions the column calls nor the deployment's
-- configuration with it (docs/decisions.md, "Message search").
CREATE SCHEMA IF NOT EXISTS inboxd_search;

-- +goose StatementBegin
DO $do$
BEGIN
    IF to_regprocedure('inboxd_search.config()') IS NULL THEN
        -- The deployment's text search configuration; `inboxd migrate
        -- --search-config` redefines it (and recomputes every row).
        CREATE FUNCTION inboxd_search.config() RETURNS regconfig
        LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 'simple'::regconfig $$;
    END IF;
    IF to_regprocedure('inboxd_search.indexed_text(text)') IS NULL THEN
        -- The text as search indexes it: the body, then every run of CJK
        -- characters again as its overlapping bigrams and its last
        -- character, since word splitting does not apply to those
        -- scripts: a query's run becomes the phrase of its bigrams and so
        -- matches any substring.
        CREATE FUNCTION inboxd_search.indexed_text(body text) RETURNS text
        LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
            SELECT body || coalesce(' ' || (
                SELECT string_agg(substr(r.m[1], i, 2), ' ' ORDER BY r.n, i)
                FROM regexp_matches(body, '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+', 'g')
                        WITH ORDINALITY AS r(m, n),
                     generate_series(1, char_length(r.m[1])) AS i), '')
        $$;
    END IF;
    IF to_regprocedure('inboxd_search.vector(text)') IS NULL THEN
        -- One expression, not STRICT, so that PostgreSQL inlines it into
        -- the column and folds config() to a constant; the bigrams' query
        -- runs only for a body with CJK characters (a fifth of the cost
        -- per row of calling indexed_text always: docs/benchmarks.md).
        CREATE FUNCTION inboxd_search.vector(body text) RETURNS tsvector
        LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
            SELECT to_tsvector(inboxd_search.config(),
                CASE WHEN body ~ '[぀-ヿ㐀-䶿一-鿿豈-﫿가-힯]'
                    THEN inboxd_search.indexed_text(body) ELSE body END)
        $$;
    END IF;
END
$do$;
-- +goose StatementEnd

ALTER TABLE messages ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (
    CASE WHEN deleted OR kind <> 'text' THEN NULL ELSE inboxd_search.vector(body) END) STORED;
CREATE INDEX messages_search ON messages USING gin (search_vector);

-- +goose Down
DROP INDEX messages_search;
ALTER TABLE messages DROP COLUMN search_vector;
