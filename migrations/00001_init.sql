-- +goose Up
-- The projections of the event log (see docs/events.md and DESIGN.md).
-- Everything here can be rebuilt from the topic by `inboxd replay`.

-- One generation of the projections. Cursors carry it; a replay starts a new one.
CREATE TABLE meta (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    epoch     bigint  NOT NULL
);
INSERT INTO meta (epoch) VALUES ((extract(epoch FROM clock_timestamp()) * 1000)::bigint);

-- Conversation ids are allocated by the gateway before the created event is
-- appended, so the key of the record is known up front.
CREATE SEQUENCE conversation_ids;

CREATE TABLE conversations (
    id         bigint      PRIMARY KEY,
    title      text        NOT NULL DEFAULT '',
    created_by bigint      NOT NULL,
    created_at timestamptz NOT NULL,
    last_seq   bigint      NOT NULL DEFAULT 0,
    last_at    timestamptz NOT NULL
);

-- Membership as spans of conversation seqs: a member sees joined_seq..left_seq
-- (both inclusive: it receives its own join and its own removal).
CREATE TABLE member_spans (
    conversation_id bigint NOT NULL,
    user_id         bigint NOT NULL,
    joined_seq      bigint NOT NULL,
    left_seq        bigint,
    PRIMARY KEY (conversation_id, user_id, joined_seq)
);
CREATE UNIQUE INDEX member_spans_current ON member_spans (conversation_id, user_id) WHERE left_seq IS NULL;
CREATE INDEX member_spans_user ON member_spans (user_id, conversation_id);

CREATE TABLE messages (
    conversation_id bigint      NOT NULL,
    seq             bigint      NOT NULL,
    msg_id          uuid        NOT NULL,
    sender_id       bigint      NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('text', 'system')),
    body            text        NOT NULL,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (conversation_id, seq)
);
CREATE UNIQUE INDEX messages_msg_id ON messages (msg_id);

-- inbox_seq is the head of the user's inbox; entries floor+1..head are retained.
CREATE TABLE users (
    id             bigint PRIMARY KEY,
    inbox_seq      bigint NOT NULL DEFAULT 0,
    inbox_floor    bigint NOT NULL DEFAULT 0,
    record_version bigint NOT NULL DEFAULT 0
);

-- kind 1 = message (seq is the conversation seq), kind 2 = record (version is
-- the record version written by that change).
CREATE TABLE inbox (
    user_id         bigint      NOT NULL,
    inbox_seq       bigint      NOT NULL,
    conversation_id bigint      NOT NULL,
    kind            smallint    NOT NULL CHECK (kind IN (1, 2)),
    seq             bigint      NOT NULL DEFAULT 0,
    version         bigint      NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (user_id, inbox_seq)
);

-- One user's view of one conversation.
CREATE TABLE records (
    user_id         bigint  NOT NULL,
    conversation_id bigint  NOT NULL,
    pinned          boolean NOT NULL DEFAULT false,
    muted           boolean NOT NULL DEFAULT false,
    read_seq        bigint  NOT NULL DEFAULT 0,
    version         bigint  NOT NULL,
    removed         boolean NOT NULL DEFAULT false,
    PRIMARY KEY (user_id, conversation_id)
);
CREATE INDEX records_version ON records (user_id, version);

-- Events refused at their log position (a sender who is not a member, ...).
-- The gateway answers a waiting sender from here.
CREATE TABLE rejections (
    event_id        uuid        PRIMARY KEY,
    msg_id          uuid,
    event_type      text        NOT NULL,
    conversation_id bigint      NOT NULL,
    actor_id        bigint      NOT NULL,
    reason          text        NOT NULL,
    topic           text        NOT NULL,
    "partition"     integer     NOT NULL,
    "offset"        bigint      NOT NULL,
    rejected_at     timestamptz NOT NULL
);
CREATE INDEX rejections_msg_id ON rejections (msg_id) WHERE msg_id IS NOT NULL;

-- The next offset to apply per partition, written in the projecting transaction.
CREATE TABLE consumer_offsets (
    topic       text        NOT NULL,
    "partition" integer     NOT NULL,
    next_offset bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, "partition")
);

-- +goose Down
DROP TABLE consumer_offsets, rejections, records, inbox, users, messages, member_spans, conversations, meta;
DROP SEQUENCE conversation_ids;
