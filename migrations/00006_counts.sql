-- +goose Up
-- Unread and mention counts (docs/decisions.md, "Unread and mention
-- counts"): counted when read, from these columns, never kept per member per
-- message.
--
-- ord: the number of text messages of the conversation up to and including
-- this one (a system message repeats the ord before it), so that the text
-- messages in (a, b] are ord(b) - ord(a). text_count is the ord of the
-- conversation's last message.
ALTER TABLE messages
    ADD COLUMN ord         bigint   NOT NULL DEFAULT 0,
    ADD COLUMN mentions    bigint[],
    ADD COLUMN mention_all boolean  NOT NULL DEFAULT false;
ALTER TABLE conversations ADD COLUMN text_count bigint NOT NULL DEFAULT 0;

UPDATE messages m SET ord = x.ord
FROM (SELECT conversation_id, seq,
        count(*) FILTER (WHERE kind = 'text') OVER (PARTITION BY conversation_id ORDER BY seq) AS ord
      FROM messages) x
WHERE m.conversation_id = x.conversation_id AND m.seq = x.seq AND m.ord <> x.ord;
UPDATE conversations c SET text_count = m.ord
FROM messages m WHERE m.conversation_id = c.id AND m.seq = c.last_seq;

-- The users a message mentions (explicitly; "@all" is messages.mention_all).
CREATE TABLE mentions (
    user_id         bigint NOT NULL,
    conversation_id bigint NOT NULL,
    seq             bigint NOT NULL,
    PRIMARY KEY (user_id, conversation_id, seq)
);

-- A count subtracts the deleted text messages and adds the @all messages of
-- a range: both are rare, so these indexes stay small.
CREATE INDEX messages_deleted_text ON messages (conversation_id, seq) WHERE deleted AND kind = 'text';
CREATE INDEX messages_mention_all ON messages (conversation_id, seq) WHERE mention_all;

-- The read position now also moves with the member's own sends (past each
-- of its messages) and with its joins (to the join message): what a replay
-- of the log would compute, so that an upgraded database agrees with it.
WITH own AS (SELECT conversation_id, sender_id AS user_id, max(seq) AS s FROM messages
             WHERE kind = 'text' GROUP BY conversation_id, sender_id),
     joins AS (SELECT conversation_id, user_id, max(joined_seq) AS s FROM member_spans
               GROUP BY conversation_id, user_id),
     x AS (SELECT r2.user_id, r2.conversation_id,
             greatest(r2.read_seq, COALESCE(own.s, 0), COALESCE(joins.s, 0)) AS floor
           FROM records r2
           LEFT JOIN own ON own.conversation_id = r2.conversation_id AND own.user_id = r2.user_id
           LEFT JOIN joins ON joins.conversation_id = r2.conversation_id AND joins.user_id = r2.user_id)
UPDATE records r SET read_seq = x.floor FROM x
WHERE r.user_id = x.user_id AND r.conversation_id = x.conversation_id AND r.read_seq < x.floor;

-- +goose Down
DROP INDEX messages_mention_all;
DROP INDEX messages_deleted_text;
DROP TABLE mentions;
ALTER TABLE conversations DROP COLUMN text_count;
ALTER TABLE messages DROP COLUMN mention_all, DROP COLUMN mentions, DROP COLUMN ord;
