-- +goose Up
-- delivery_base: added to a source partition's offsets to number the
-- deliveries its conversation stage emits (outbox.source_offset, compared
-- with delivery_marks.applied on the users' servers). An operator's reset
-- of the partition's offsets back (inboxd offsets, after the topic was
-- recreated or the log lost records) raises it by as much as the offsets
-- went back, so that the deliveries of the records applied again number
-- above every delivery emitted before: they are new deliveries, not
-- copies of old ones. 0 until a reset moves a partition back.
ALTER TABLE consumer_offsets ADD COLUMN delivery_base bigint NOT NULL DEFAULT 0 CHECK (delivery_base >= 0);

-- +goose Down
ALTER TABLE consumer_offsets DROP COLUMN delivery_base;
