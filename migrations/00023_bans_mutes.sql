-- +goose Up
-- Bans and mutes of conversation members (docs/protocol.md, "Ban and
-- mute"; docs/decisions.md, "Ban and mute").
--
-- sanctions: a projection of member.banned/unbanned and
-- member.muted/unmuted, one row per (conversation, user, kind) while the
-- ban or mute stands. until is when it lapses (NULL: until lifted); a
-- lapsed row stays until it is lifted or set again, and is judged lapsed
-- by the time of the event that meets it (the projection) or by now()
-- (the gateway's early answers). set_by is the actor (0: a service as
-- itself), set_at the event's time, so that a replay writes the same row.
-- A mute outlives its member's span: leaving and rejoining does not lift it.
CREATE TABLE sanctions (
    conversation_id bigint      NOT NULL,
    user_id         bigint      NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('ban', 'mute')),
    until           timestamptz,
    set_by          bigint      NOT NULL,
    set_at          timestamptz NOT NULL,
    PRIMARY KEY (conversation_id, user_id, kind)
);

-- +goose Down
DROP TABLE sanctions;
