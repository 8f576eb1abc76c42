-- +goose Up
-- The keys of sealed bodies (events.Seal), by msg_id: not a projection (a
-- replay keeps it and reads it), so that deleting a message's key erases its
-- body from the log for good: the log keeps only the sealed form.
CREATE TABLE body_keys (
    msg_id     uuid        PRIMARY KEY,
    key        bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE body_keys;
