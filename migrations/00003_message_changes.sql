-- +goose Up
-- A message's life after it is sent (docs/protocol.md, "Changing a
-- message"): the row holds its current state. version starts at 1 and grows
-- with every change; a deleted message keeps its seq and serves no body.
-- reactions holds the count per emoji ({"👍": 3}), NULL when there is none.
ALTER TABLE messages
    ADD COLUMN version   bigint      NOT NULL DEFAULT 1,
    ADD COLUMN edited_at timestamptz,
    ADD COLUMN deleted   boolean     NOT NULL DEFAULT false,
    ADD COLUMN reply_to  bigint,
    ADD COLUMN reactions jsonb;

-- One reaction per user per message.
CREATE TABLE reactions (
    conversation_id bigint NOT NULL,
    seq             bigint NOT NULL,
    user_id         bigint NOT NULL,
    emoji           text   NOT NULL,
    PRIMARY KEY (conversation_id, seq, user_id)
);

-- The applied changes by their idempotency key: a change_id is applied at
-- most once, and a retried request answers from here.
CREATE TABLE changes (
    change_id       uuid   PRIMARY KEY,
    event_id        uuid   NOT NULL,
    conversation_id bigint NOT NULL,
    seq             bigint NOT NULL,
    actor_id        bigint NOT NULL,
    version         bigint NOT NULL
);

-- kind 3 = update: the message (conversation_id, seq) changed; version is
-- the message's version written by that change.
ALTER TABLE inbox DROP CONSTRAINT inbox_kind_check;
ALTER TABLE inbox ADD CONSTRAINT inbox_kind_check CHECK (kind IN (1, 2, 3));

-- +goose Down
ALTER TABLE inbox DROP CONSTRAINT inbox_kind_check;
DELETE FROM inbox WHERE kind = 3;
ALTER TABLE inbox ADD CONSTRAINT inbox_kind_check CHECK (kind IN (1, 2));
DROP TABLE changes;
DROP TABLE reactions;
ALTER TABLE messages DROP COLUMN reactions, DROP COLUMN reply_to, DROP COLUMN deleted,
    DROP COLUMN edited_at, DROP COLUMN version;
