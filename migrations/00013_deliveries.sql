-- +goose Up
-- The crossing of the two stages (docs/scaling.md, "The two stages"): what
-- the conversation stage of a server projects for users on other servers
-- leaves through the outbox, in the same transaction as the conversation
-- state and the event topic's offsets, and reaches the user stage of the
-- user's server as a record of the deliveries topic, on the user's
-- partition. A relay produces the outbox rows in id order and deletes
-- them once Kafka has them; a crash between the two produces them again,
-- and the user stage drops the copies by its marks.
--
-- outbox: one row per (source partition of the event topic, the batch's
-- next offset on it, destination partition): payload is the delivery,
-- the entries of the destination's users in the batch's order. Rows of
-- one source partition commit in offset order (its offset row is locked
-- by every batch), so the relay reads them in that order.
CREATE TABLE outbox (
    id               bigserial   PRIMARY KEY,
    destination      integer     NOT NULL CHECK (destination >= 0),
    source_partition integer     NOT NULL CHECK (source_partition >= 0),
    source_offset    bigint      NOT NULL CHECK (source_offset > 0),
    payload          jsonb       NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (source_partition, source_offset, destination)
);

-- delivery_sources: on the conversation's server, per source partition
-- and destination partition, how many deliveries were emitted and the
-- last one's offset, in the transaction that emitted them; with the
-- marks' applied counts, the check across servers that every delivery
-- emitted is applied once (projector.VerifyCrossing).
CREATE TABLE delivery_sources (
    source_partition integer NOT NULL CHECK (source_partition >= 0),
    destination      integer NOT NULL CHECK (destination >= 0),
    emitted          bigint  NOT NULL CHECK (emitted > 0),
    last_offset      bigint  NOT NULL,
    PRIMARY KEY (source_partition, destination)
);

-- delivery_marks: on the user's server, per destination partition and
-- source partition, the source offset of the last delivery applied, in
-- the same transaction as its entries and the deliveries topic's
-- offsets. A delivery at or below its mark is a copy and changes nothing:
-- every delivery emitted is applied once. applied_count counts them.
CREATE TABLE delivery_marks (
    destination      integer     NOT NULL CHECK (destination >= 0),
    source_partition integer     NOT NULL CHECK (source_partition >= 0),
    applied          bigint      NOT NULL,
    applied_count    bigint      NOT NULL DEFAULT 0,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (destination, source_partition)
);

-- placement_fence: the oldest placement version a stage may project
-- under on this server. Every batch of a sharded stage reads it with FOR
-- SHARE and refuses to go on when its own version is older; raising it
-- (a move, docs/decisions.md) waits for the batches already running and
-- fences every later one of an older placement. 0: nothing fenced.
CREATE TABLE placement_fence (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    version bigint  NOT NULL CHECK (version >= 0)
);
INSERT INTO placement_fence (version) VALUES (0);

-- +goose Down
DROP TABLE placement_fence;
DROP TABLE delivery_marks;
DROP TABLE delivery_sources;
DROP TABLE outbox;
