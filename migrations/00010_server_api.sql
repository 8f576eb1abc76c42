-- +goose Up
-- The server API (docs/protocol.md, "Server API"; docs/decisions.md).
--
-- api_keys: the back end's credentials. Account state, not a projection of
-- the log: like user_settings it lives beside the projections, a replay
-- keeps it, and only `inboxd apikey` writes it. hash is SHA-256 of the
-- key's secret (the secret itself is shown once, at creation); a revoked
-- key keeps its row (revoked_at) so that `apikey list` shows what it was.
-- last_used_at is when a call last used the key, to the minute (a gateway
-- writes it at most once a minute per key), so that an operator rotating
-- a key sees when the old one went idle.
-- The gateways read the row on every server API call, so a revocation
-- holds on every gateway from the next request.
CREATE TABLE api_keys (
    id         bigserial   PRIMARY KEY,
    name       text        NOT NULL CHECK (name <> '' AND length(name) <= 64),
    scopes     text[]      NOT NULL,
    hash       bytea       NOT NULL CHECK (length(hash) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    last_used_at timestamptz
);

-- sender_name: a message a service sent as a named system or bot sender
-- (sender_id 0); NULL for every user's message. Nullable and without a
-- default, so adding it rewrites nothing.
ALTER TABLE messages ADD COLUMN sender_name text;

-- +goose Down
ALTER TABLE messages DROP COLUMN sender_name;
DROP TABLE api_keys;
