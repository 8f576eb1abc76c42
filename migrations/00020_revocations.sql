-- +goose Up
-- Revoked tokens (the server API's POST /v1/server/revocations), read by
-- every gateway from the catalog server: a token by its id (jti), or the
-- tokens issued before a time of one user (user_id) or of everyone (no
-- user_id). Append-only: a gateway reads the rows after the last it read.
CREATE TABLE revocations (
	id            bigserial PRIMARY KEY,
	user_id       bigint CHECK (user_id > 0),
	token_id      text,
	issued_before timestamptz,
	created_at    timestamptz NOT NULL DEFAULT now(),
	CHECK ((token_id IS NULL) <> (issued_before IS NULL))
);
CREATE INDEX revocations_created_at ON revocations (created_at);

-- +goose Down
DROP TABLE revocations;
