-- +goose Up
-- Large conversations, read fan-out (docs/large-conversations.md): above a
-- member threshold a conversation stores each message once and writes no
-- inbox row per member per message.
--
-- read_fanout: the mode now; conversation_modes: its history (a row at
-- creation and one per switch; the mode of a seq is the row's with the
-- greatest from_seq <= seq). member_count: the current members.
-- change_count: the changes of its messages while in read mode; a changed
-- message's changed_ord is the change_count its last such change set (what
-- ?changed_after=K reads).
ALTER TABLE conversations
    ADD COLUMN read_fanout  boolean NOT NULL DEFAULT false,
    ADD COLUMN channel      boolean NOT NULL DEFAULT false,
    ADD COLUMN member_count bigint  NOT NULL DEFAULT 0,
    ADD COLUMN change_count bigint  NOT NULL DEFAULT 0;
UPDATE conversations c SET member_count = m.n
FROM (SELECT conversation_id, count(*) AS n FROM member_spans WHERE left_seq IS NULL GROUP BY conversation_id) m
WHERE m.conversation_id = c.id;

CREATE TABLE conversation_modes (
    conversation_id bigint  NOT NULL,
    from_seq        bigint  NOT NULL,
    read_fanout     boolean NOT NULL,
    PRIMARY KEY (conversation_id, from_seq)
);
INSERT INTO conversation_modes (conversation_id, from_seq, read_fanout)
SELECT id, 1, false FROM conversations;

ALTER TABLE messages ADD COLUMN changed_ord bigint NOT NULL DEFAULT 0;
CREATE INDEX messages_changed ON messages (conversation_id, changed_ord) WHERE changed_ord > 0;

-- armed: the member read to the end of a read-mode conversation since the
-- last entry it got from it; the next message goes to its inbox.
ALTER TABLE records ADD COLUMN armed boolean NOT NULL DEFAULT false;
CREATE INDEX records_armed ON records (conversation_id, user_id) WHERE armed;

-- A user's read-mode conversations, read by every sync: the current
-- memberships of the user in conversations whose read_fanout is set.
CREATE INDEX conversations_read_fanout ON conversations (id) WHERE read_fanout;

-- +goose Down
DROP INDEX conversations_read_fanout;
DROP INDEX records_armed;
ALTER TABLE records DROP COLUMN armed;
DROP INDEX messages_changed;
ALTER TABLE messages DROP COLUMN changed_ord;
DROP TABLE conversation_modes;
ALTER TABLE conversations DROP COLUMN change_count, DROP COLUMN member_count, DROP COLUMN channel, DROP COLUMN read_fanout;
