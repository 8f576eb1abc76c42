-- +goose Up
-- A large upload goes to the store in parts (an S3 multipart upload):
-- the store's id of it, so that the gateway can list its parts, complete
-- it, and abort it (its parts are not objects the sweeper would find)
-- when the upload expires unattached.
ALTER TABLE uploads ADD COLUMN multipart_id text;

-- +goose Down
ALTER TABLE uploads DROP COLUMN multipart_id;
