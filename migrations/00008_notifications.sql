-- +goose Up
-- Notifications to members who are not connected (docs/notifications.md).
-- Not projections: the notifier writes them, replay leaves them alone.

-- The notifier's progress through the log, per partition, written in the
-- transaction that queues the notifications of the records before it (as
-- the fanout's consumer_offsets).
CREATE TABLE notifier_offsets (
    topic       text    NOT NULL,
    "partition" integer NOT NULL,
    next_offset bigint  NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, "partition")
);

-- The last message of each conversation whose notifications are queued:
-- the notifier reads a conversation's messages after it (so a record seen
-- twice, or a send the projection refused, queues nothing).
CREATE TABLE notifier_convs (
    conversation_id bigint PRIMARY KEY,
    last_seq        bigint NOT NULL
);

-- The notifications to deliver, one row per (user, conversation) burst:
-- messages decided while a row of the same user and conversation is still
-- pending join it (count, last seq). id is the idempotency key of every
-- delivery attempt. state: pending, sent, skipped (connected at due_at,
-- or the message deleted), dead (gave up).
CREATE TABLE notifications (
    id              uuid        PRIMARY KEY,
    user_id         bigint      NOT NULL,
    conversation_id bigint      NOT NULL,
    first_seq       bigint      NOT NULL,
    last_seq        bigint      NOT NULL,
    count           integer     NOT NULL DEFAULT 1,
    sender_id       bigint      NOT NULL,
    mention         boolean     NOT NULL DEFAULT false,
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'skipped', 'dead')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    committed_at    timestamptz NOT NULL,  -- the commit of the first message (latency)
    due_at          timestamptz NOT NULL,
    claimed_until   timestamptz,
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text,
    done_at         timestamptz
);
-- One open burst per user and conversation: pending and not yet tried.
-- Once a delivery is tried, later messages open a new burst, so that a
-- retry (same id) never stands for more than its first attempt did.
CREATE UNIQUE INDEX notifications_open ON notifications (user_id, conversation_id) WHERE state = 'pending' AND attempts = 0;
CREATE INDEX notifications_due ON notifications (due_at) WHERE state = 'pending';
-- The pending notifications of a user and conversation (a later one waits
-- for an earlier one being retried).
CREATE INDEX notifications_pending_pair ON notifications (user_id, conversation_id) WHERE state = 'pending';
CREATE INDEX notifications_done ON notifications (done_at) WHERE state <> 'pending';

-- Which gateway holds a WebSocket of which user right now (no grace, unlike
-- presence_sessions): a member with a row of a live gateway is connected
-- and is not notified.
CREATE TABLE connections (
    user_id    bigint      NOT NULL,
    gateway_id uuid        NOT NULL,
    since      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, gateway_id)
);
CREATE INDEX connections_gateway ON connections (gateway_id);

-- A user's choice: notifications off.
ALTER TABLE user_settings ADD COLUMN notifications boolean NOT NULL DEFAULT true;

-- +goose Down
ALTER TABLE user_settings DROP COLUMN notifications;
DROP TABLE connections, notifications, notifier_convs, notifier_offsets;
