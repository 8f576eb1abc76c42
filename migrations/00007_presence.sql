-- +goose Up
-- Presence (docs/websocket.md, "Typing and presence"): which gateway
-- processes hold WebSocket sessions of which users, and when each user was
-- last seen. Ephemeral state written directly by the gateways, never by the
-- log: not a projection, not in a replay's swap, never in the inbox.

-- One row per live gateway process, refreshed every expiry/3. A gateway
-- whose row is older than the expiry is dead: another gateway deletes it
-- with its presence rows and publishes its users' offline.
CREATE TABLE presence_gateways (
    gateway_id   uuid        PRIMARY KEY,
    heartbeat_at timestamptz NOT NULL
);

-- The users a gateway holds WebSocket sessions of: a row from the user's
-- first session on the gateway until the grace period after its last one
-- ended. A user is online while a row of a live gateway names them.
CREATE TABLE presence_sessions (
    user_id    bigint      NOT NULL,
    gateway_id uuid        NOT NULL,
    since      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, gateway_id)
);
CREATE INDEX presence_sessions_gateway ON presence_sessions (gateway_id);

-- When a user went offline last (its last session on any gateway ended,
-- grace included).
CREATE TABLE presence_last_seen (
    user_id   bigint      PRIMARY KEY,
    last_seen timestamptz NOT NULL
);

-- +goose Down
DROP TABLE presence_last_seen, presence_sessions, presence_gateways;
