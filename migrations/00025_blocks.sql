-- +goose Up
-- Blocks between users (docs/protocol.md, "Blocks"; docs/decisions.md,
-- "Blocks between users").
--
-- blocks: a projection of user.blocked/user.unblocked, one row per pair
-- while the blocker blocks, on the blocker's server (the events are keyed
-- by the blocker, so they are projected on the server of its partition).
-- at is the time of the user.blocked that set the row; blocking again
-- keeps it, so a replay writes the same row.
CREATE TABLE blocks (
    blocker_id bigint      NOT NULL,
    blocked_id bigint      NOT NULL,
    at         timestamptz NOT NULL,
    PRIMARY KEY (blocker_id, blocked_id)
);

-- +goose Down
DROP TABLE blocks;
