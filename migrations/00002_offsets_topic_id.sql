-- +goose Up
-- The id of the topic the stored offsets belong to. A topic deleted and
-- created again under the same name starts its offsets at 0 with a new id:
-- the fanout compares this id with the log's and stops the partition
-- instead of taking the new records for ones already applied. NULL until
-- a fanout (or replay) learns the id.
ALTER TABLE consumer_offsets ADD COLUMN topic_id uuid;

-- +goose Down
ALTER TABLE consumer_offsets DROP COLUMN topic_id;
