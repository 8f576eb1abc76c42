-- +goose Up
-- move_phase: how far a move of the partition got (placement.Move):
-- started (paused, not copied yet; abortable) or copied (the target holds
-- the partition's state; it can only be resumed). NULL when serving.
ALTER TABLE placement ADD COLUMN move_phase text
    CHECK (move_phase IN ('started', 'copied') AND state = 'moving' OR move_phase IS NULL AND state = 'serving');

-- placement_version: the version of the placement each gateway reads
-- (written with its heartbeat; NULL for a gateway that does not say). A
-- move removes a partition from its old server only once no live gateway
-- reads an older placement, which would read the partition there.
ALTER TABLE presence_gateways ADD COLUMN placement_version bigint;

-- +goose Down
ALTER TABLE presence_gateways DROP COLUMN placement_version;
ALTER TABLE placement DROP COLUMN move_phase;
