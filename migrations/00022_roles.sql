-- +goose Up
-- Roles of members (docs/protocol.md, "Roles"; docs/decisions.md, "Roles").
--
-- member_spans.role is the member's role while its span is open; a closed
-- span keeps the role its member had when it left, and a rejoin opens a
-- span with role 'member' (a removed member loses its role).
-- conversations.owner_id is the one owner (0: none, as for a
-- conversation a service created, or one whose owner left), so that a
-- batch that loads only some members of a read-mode conversation still
-- knows whom a transfer of ownership demotes; its open span has role
-- 'owner'. conversations.roles says whether the roles limit adding and
-- removing members (conversation.created's roles: false for the
-- conversations created before roles, whose log was judged without
-- them).
ALTER TABLE conversations ADD COLUMN roles boolean NOT NULL DEFAULT false,
    ADD COLUMN owner_id bigint NOT NULL DEFAULT 0;
ALTER TABLE member_spans ADD COLUMN role text NOT NULL DEFAULT 'member'
    CHECK (role IN ('owner', 'admin', 'moderator', 'member'));
-- The creator owns a conversation while the span its creation opened
-- (seq 1) is open: what a replay of the log projects.
UPDATE conversations c SET owner_id = c.created_by
FROM member_spans m
WHERE c.created_by > 0 AND m.conversation_id = c.id AND m.user_id = c.created_by AND m.joined_seq = 1 AND m.left_seq IS NULL;
UPDATE member_spans m SET role = 'owner'
FROM conversations c
WHERE c.owner_id > 0 AND m.conversation_id = c.id AND m.user_id = c.owner_id AND m.left_seq IS NULL;

-- +goose Down
ALTER TABLE member_spans DROP COLUMN role;
ALTER TABLE conversations DROP COLUMN owner_id, DROP COLUMN roles;
