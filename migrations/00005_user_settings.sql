-- +goose Up
-- A user's own settings (docs/protocol.md, "Settings"): account state, not a
-- projection of the log. Like body_keys it lives beside the projections
-- (public), a replay keeps it, and the gateway writes it directly.
-- hide_receipts: the user's read positions are not shown to other members.
-- hide_presence: the user's online state and last seen are not shown.
CREATE TABLE user_settings (
    user_id       bigint      PRIMARY KEY,
    hide_receipts boolean     NOT NULL DEFAULT false,
    hide_presence boolean     NOT NULL DEFAULT false,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE user_settings;
