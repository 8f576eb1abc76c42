-- +goose Up
-- Reports of messages (docs/protocol.md, "Reports"; docs/decisions.md).
--
-- reports: a projection of message.reported and report.resolved, keyed by
-- the report's id (the reporter's idempotency key: a record seen twice, a
-- retried report or a replay write it once). It is the moderators' queue,
-- read through the server API; members never see it. sender_id is the
-- reported message's sender when it was reported (0: a service's system
-- sender); the body is not copied (it may be sealed, and a delete must
-- erase it): the server API reads it from messages. created_at is the
-- report event's time, so a replay rebuilds the same order.
CREATE TABLE reports (
    id              uuid        PRIMARY KEY,
    event_id        uuid        NOT NULL,
    conversation_id bigint      NOT NULL,
    seq             bigint      NOT NULL,
    msg_id          uuid        NOT NULL,
    sender_id       bigint      NOT NULL,
    reporter_id     bigint      NOT NULL,
    reason          text        NOT NULL,
    note            text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    state           text        NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'resolved')),
    resolution      text        CHECK (resolution IN ('dismissed', 'actioned')),
    resolution_note text,
    resolved_by     text,
    resolved_at     timestamptz,
    CHECK ((state = 'resolved') = (resolution IS NOT NULL))
);
-- The queue's pages: by state, oldest first (keyset on created_at, id),
-- and the same within one conversation.
CREATE INDEX reports_queue ON reports (state, created_at, id);
CREATE INDEX reports_conversation ON reports (conversation_id, state, created_at, id);

-- The notifier posts each report to the webhook (docs/notifications.md):
-- a notification of kind 'report' names it. Such a row is no member's
-- burst: it never joins one (the open-burst index is for messages only)
-- and is never skipped for a connected user.
ALTER TABLE notifications ADD COLUMN kind text NOT NULL DEFAULT 'message' CHECK (kind IN ('message', 'report'));
ALTER TABLE notifications ADD COLUMN report_id uuid;
DROP INDEX notifications_open;
CREATE UNIQUE INDEX notifications_open ON notifications (user_id, conversation_id)
    WHERE state = 'pending' AND attempts = 0 AND kind = 'message';

-- +goose Down
DROP INDEX notifications_open;
DELETE FROM notifications WHERE kind <> 'message';
CREATE UNIQUE INDEX notifications_open ON notifications (user_id, conversation_id) WHERE state = 'pending' AND attempts = 0;
ALTER TABLE notifications DROP COLUMN report_id, DROP COLUMN kind;
DROP TABLE reports;
