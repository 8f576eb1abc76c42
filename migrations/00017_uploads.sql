-- +goose Up
-- Uploads of attachments (docs/protocol.md, "Attachments"), on the
-- conversation's server. A member asks for an upload and gets a key and
-- a presigned URL; it seals the file with the key (attachments/sealed)
-- and PUTs it to the object store under object_key. A send that attaches
-- it claims it (msg_id) in its check and carries its description, key
-- included, sealed with the message's body key in the log; the
-- projection keeps that description in messages.attachments. Not a
-- projection: a replay keeps this table, as it keeps body_keys.
--
-- state: 'open' (asked for, maybe uploaded, maybe claimed by a send not
-- projected yet), 'attached' (its message is projected: the projection
-- set it), 'erased' (its message was deleted: the key is gone here and
-- in the message, the object is to be removed), 'removing' (the sweeper
-- is removing the object: an upload never attached past expires_at, or
-- an erased one). The sweeper deletes the row once the object is gone.
CREATE TABLE uploads (
    id              uuid        PRIMARY KEY,
    conversation_id bigint      NOT NULL,
    user_id         bigint      NOT NULL,
    name            text        NOT NULL,
    content_type    text        NOT NULL,
    size            bigint      NOT NULL CHECK (size > 0),
    sha256          text,
    width           integer,
    height          integer,
    key             bytea,
    object_key      text        NOT NULL,
    state           text        NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'attached', 'erased', 'removing')),
    msg_id          uuid,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL
);
-- The sweeper's work, and a user's open uploads (the quota).
CREATE INDEX uploads_sweep ON uploads (expires_at) WHERE state <> 'attached';
CREATE INDEX uploads_user_open ON uploads (user_id) WHERE state = 'open';
CREATE INDEX uploads_msg_id ON uploads (msg_id) WHERE msg_id IS NOT NULL;

-- What a message attaches, as the projection stored it: an array of
-- {id, name, content_type, size, sha256, width, height, key}; NULL when
-- none, and set to NULL when the message is deleted (with the key, the
-- stored object cannot be opened; without it, nothing can).
ALTER TABLE messages ADD COLUMN attachments jsonb;

-- +goose Down
ALTER TABLE messages DROP COLUMN attachments;
DROP TABLE uploads;
