-- +goose Up
-- Bulk import (docs/import.md). messages.imported marks history brought
-- over by `inboxd import`: it has a seq like every message but no inbox
-- entry (I3 leaves it out), and it is at or below every member's read
-- position.
ALTER TABLE messages ADD COLUMN imported boolean NOT NULL DEFAULT false;

-- The importer's own state, not a projection (replay neither rebuilds nor
-- swaps it): the inboxd conversation id each external conversation id was
-- given (from the conversation_ids sequence, like the gateway's), so that
-- a second run of a file reuses it; and how far each file got.
CREATE TABLE import_conversations (
    source          text        NOT NULL,
    external_id     text        NOT NULL,
    conversation_id bigint      NOT NULL UNIQUE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, external_id)
);

-- next_line: every line below it is acknowledged by the log.
CREATE TABLE import_checkpoints (
    source      text        NOT NULL,
    file_sha256 text        NOT NULL,
    next_line   bigint      NOT NULL,
    done        boolean     NOT NULL DEFAULT false,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, file_sha256)
);

-- +goose Down
DROP TABLE import_checkpoints;
DROP TABLE import_conversations;
ALTER TABLE messages DROP COLUMN imported;
