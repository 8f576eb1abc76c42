-- +goose Up
-- The placement (docs/scaling.md, "Placement"): which PostgreSQL server
-- holds each Kafka partition's state. A conversation's state follows its
-- partition of the event topic, a user's its partition of the user-keyed
-- topic; both topics have the same partition count, so one row per
-- partition number places both. This is the only state sharding adds.
--
-- Every server has these tables (one schema everywhere); the copy on the
-- catalog server (the one DATABASE_URL names, server 1) is the one that
-- counts, and only `inboxd shards` writes it. A partition without a row
-- is on server 1: an existing single-server database is today's
-- deployment, server 1 holding every partition, without a write.
--
-- shard_servers.dsn: how every process reaches the server; NULL for
-- server 1, which is the catalog's own database. A DSN may carry a
-- password: keep it in a passfile or the environment
-- (docs/operations.md).
CREATE TABLE shard_servers (
    id       integer     PRIMARY KEY CHECK (id >= 1),
    name     text        NOT NULL UNIQUE CHECK (name <> '' AND length(name) <= 64),
    dsn      text        CHECK ((id = 1) = (dsn IS NULL)),
    added_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO shard_servers (id, name) VALUES (1, 'server-1');

-- state: 'serving' (the partition's state is on server and served from
-- it) or 'moving' (a move to target is under way: copied while live,
-- then paused, caught up and switched; docs/operations.md, "Moving
-- partitions").
CREATE TABLE placement (
    "partition" integer     PRIMARY KEY CHECK ("partition" >= 0),
    server      integer     NOT NULL REFERENCES shard_servers (id),
    state       text        NOT NULL DEFAULT 'serving' CHECK (state IN ('serving', 'moving')),
    target      integer     REFERENCES shard_servers (id),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((state = 'moving') = (target IS NOT NULL)),
    CHECK (target IS DISTINCT FROM server)
);

-- version: bumped by every change of the two tables above, so a process
-- that reloads the placement knows whether it changed; the change is also
-- announced on the NOTIFY channel inboxd_placement.
CREATE TABLE placement_version (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    version bigint  NOT NULL
);
INSERT INTO placement_version (version) VALUES (1);

-- shard_identity: which server of a deployment this database is, written
-- on the catalog (1) and on a server when it is added, so that adding the
-- same database twice, or the catalog itself, is refused. Empty until
-- then.
CREATE TABLE shard_identity (
    one    boolean PRIMARY KEY DEFAULT true CHECK (one),
    server integer NOT NULL CHECK (server >= 1)
);

-- +goose Down
DROP TABLE shard_identity;
DROP TABLE placement_version;
DROP TABLE placement;
DROP TABLE shard_servers;
