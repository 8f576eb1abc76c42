-- +goose Up
-- Conversation settings (docs/protocol.md, "Frozen and slow mode";
-- docs/decisions.md, "Conversation settings").
--
-- conversations.frozen and slow_mode are projected from
-- conversation.updated (title, which it may change too, already is a
-- column): a frozen conversation refuses writes from members below admin,
-- and slow_mode (seconds, 0: off) is how long a member below moderator
-- waits between its sends there.
ALTER TABLE conversations ADD COLUMN frozen boolean NOT NULL DEFAULT false,
    ADD COLUMN slow_mode integer NOT NULL DEFAULT 0 CHECK (slow_mode >= 0);

-- slow_sends: the gateways' admission of sends in slow mode, one row per
-- (conversation, user) that sent there while it was on: last_at is the
-- time (this server's clock) of its last admitted send, msg_id that
-- send's, so that a retry of it is admitted again. Not a projection: no
-- replay rebuilds it (losing it only lets each member send once more at
-- once); placement moves it with its conversation.
CREATE TABLE slow_sends (
    conversation_id bigint      NOT NULL,
    user_id         bigint      NOT NULL,
    last_at         timestamptz NOT NULL,
    msg_id          uuid        NOT NULL,
    PRIMARY KEY (conversation_id, user_id)
);

-- +goose Down
DROP TABLE slow_sends;
ALTER TABLE conversations DROP COLUMN slow_mode, DROP COLUMN frozen;
