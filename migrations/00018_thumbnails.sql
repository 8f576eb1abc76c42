-- +goose Up
-- Thumbnails of attached images: the projection asks for one
-- ('wanted') when it attaches a JPEG, PNG, GIF or WebP; a gateway's
-- thumbnail worker takes it under a lease (thumbnail_lease, so that a
-- worker killed mid-way leaves it to another), stores the thumbnail next
-- to the file and appends message.thumbnailed ('done'), or gives up on an
-- image it cannot read ('failed').
ALTER TABLE uploads ADD COLUMN thumbnail text CHECK (thumbnail IN ('wanted', 'done', 'failed'));
ALTER TABLE uploads ADD COLUMN thumbnail_lease timestamptz;
CREATE INDEX uploads_thumbnail_wanted ON uploads (id) WHERE thumbnail = 'wanted';

-- +goose Down
DROP INDEX uploads_thumbnail_wanted;
ALTER TABLE uploads DROP COLUMN thumbnail_lease;
ALTER TABLE uploads DROP COLUMN thumbnail;
