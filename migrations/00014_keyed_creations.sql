-- +goose Up
-- keyed_creations: on the catalog (server 1), the conversation id each
-- keyed creation of the server API got (the event id derives from the
-- service and its Idempotency-Key). Concurrent calls with one key take
-- the same id here, so they append the same creation, which the
-- conversation's server projects once. Without it each call took its own
-- id and relied on the projection refusing the second creation's msg_id,
-- which a sharded placement cannot: the two ids may be on two servers.
CREATE TABLE keyed_creations (
    event_id        uuid        PRIMARY KEY,
    conversation_id bigint      NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE keyed_creations;
