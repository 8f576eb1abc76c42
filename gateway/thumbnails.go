package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // decoders of the images thumbnails are made of
	"image/jpeg"
	_ "image/png"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/image/draw"
	_ "golang.org/x/image/webp"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/protocol/sealed"
)

// Thumbnails of attached images (docs/protocol.md, "Attachments"). The
// projection marks an attached JPEG, PNG, GIF or WebP wanted; a gateway's
// worker takes it under a lease, reads and opens the file, scales it to
// fit ThumbnailSize, encodes a JPEG, seals it with a key derived from the
// file's (sealed.ThumbnailKey), stores it beside the file and appends
// message.thumbnailed, whose change_id is derived from the attachment's id:
// a worker killed at any point leaves the lease to expire, and its
// successor makes the same thumbnail under the same key and appends the
// same change, which the projection applies once. Off the send path: a
// message is answered, pushed and read before its thumbnail exists.

// Defaults of the thumbnails.
const (
	DefaultThumbnailSize  = 320
	DefaultThumbnailLease = time.Minute
	// maxThumbnailPixels bounds the images decoded (a small file can
	// declare a huge canvas: a decompression bomb).
	maxThumbnailPixels = 50_000_000
)

// thumbnailNamespace makes a thumbnail's change_id from its attachment's id.
var thumbnailNamespace = uuid.MustParse("6f1f4a52-3c44-4b8f-9d55-0a4f3b3c2e10")

// ThumbnailChangeID is the change_id of the thumbnail of attachment id.
func ThumbnailChangeID(id string) string {
	return uuid.NewSHA1(thumbnailNamespace, []byte(id)).String()
}

// thumbnailObject is where the thumbnail of the file at object lives.
func thumbnailObject(object string) string { return object + "-thumb" }

const (
	sqlThumbTake = `UPDATE uploads SET thumbnail_lease = now() + $1 * interval '1 millisecond'
WHERE id = (SELECT id FROM uploads WHERE thumbnail = 'wanted' AND state = 'attached'
	AND (thumbnail_lease IS NULL OR thumbnail_lease < now()) ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id::text, conversation_id, object_key, msg_id::text`
	// The message of the upload, and the file's key, as the projection
	// stored them.
	sqlThumbMessage = `SELECT m.seq, m.sender_id, a->>'key', (a->>'size')::bigint
FROM messages m CROSS JOIN LATERAL jsonb_array_elements(m.attachments) a
WHERE m.msg_id = $1 AND a->>'id' = $2 AND NOT m.deleted`
	sqlThumbEnd = `UPDATE uploads SET thumbnail = $2, thumbnail_lease = NULL WHERE id = $1::uuid`
	// sqlThumbHold holds the upload, still attached, while its thumbnail
	// is stored: the sweeper takes rows FOR UPDATE SKIP LOCKED, so it
	// cannot remove the file (and the thumbnail, not there yet) of a
	// message deleted meanwhile and then leave the thumbnail stored after
	// it with no row to find it by. KEY SHARE, so that the projection's
	// erase of the row is not held up.
	sqlThumbHold = `SELECT true FROM uploads WHERE id = $1::uuid AND state = 'attached' FOR KEY SHARE`
)

// errNoThumbnail is an image no thumbnail can be made of.
var errNoThumbnail = errors.New("no thumbnail can be made of it")

// MakeThumbnails makes the thumbnails wanted on every server until none
// is left, and returns how many it made.
func (g *Gateway) MakeThumbnails(ctx context.Context) (int, error) {
	if g.cfg.Attachments.Store == nil {
		return 0, nil
	}
	made := 0
	for i, pool := range g.srv.Pools {
		for {
			ok, err := g.makeThumbnail(ctx, pool)
			if err != nil {
				return made, fmt.Errorf("thumbnails of server %d: %w", i+1, err)
			}
			if !ok {
				break
			}
			made++
		}
	}
	return made, nil
}

// makeThumbnail takes one wanted thumbnail of pool and makes it; false
// when none is wanted.
func (g *Gateway) makeThumbnail(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	ac := &g.cfg.Attachments
	var id, object, msgID string
	var cid int64
	err := pool.QueryRow(ctx, sqlThumbTake, ac.ThumbnailLease.Milliseconds()).Scan(&id, &cid, &object, &msgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var seq, sender, size int64
	var keyText string
	err = pool.QueryRow(ctx, sqlThumbMessage, msgID, id).Scan(&seq, &sender, &keyText, &size)
	if errors.Is(err, pgx.ErrNoRows) {
		// Deleted since, or its message does not keep it: nothing to show.
		_, err = pool.Exec(ctx, sqlThumbEnd, id, "failed")
		return true, err
	}
	if err != nil {
		return false, err
	}
	key, err := base64.RawURLEncoding.DecodeString(keyText)
	if err != nil {
		return false, fmt.Errorf("key of attachment %s: %w", id, err)
	}
	thumb, w, h, err := g.thumbnailOf(ctx, object, size, key)
	if errors.Is(err, errNoThumbnail) {
		g.log.Info("no thumbnail for an attached image", "attachment", id, "conversation_id", cid, "err", err)
		g.metrics.thumbnails.WithLabelValues("failed").Inc()
		_, err = pool.Exec(ctx, sqlThumbEnd, id, "failed")
		return true, err
	}
	if err != nil {
		return false, err
	}
	var buf bytes.Buffer
	if err := sealed.Seal(&buf, bytes.NewReader(thumb), int64(len(thumb)), sealed.ThumbnailKey(key)); err != nil {
		return false, err
	}
	stored := false
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var attached bool
		if err := tx.QueryRow(ctx, sqlThumbHold, id).Scan(&attached); errors.Is(err, pgx.ErrNoRows) {
			return nil
		} else if err != nil {
			return fmt.Errorf("hold upload %s: %w", id, err)
		}
		if err := ac.Store.Put(ctx, thumbnailObject(object), &buf, int64(buf.Len())); err != nil {
			return fmt.Errorf("store the thumbnail of %s: %w", id, err)
		}
		stored = true
		return nil
	})
	if err != nil {
		return false, err
	}
	if !stored {
		// Its message was deleted since, and the sweeper has it.
		_, err = pool.Exec(ctx, sqlThumbEnd, id, "failed")
		return true, err
	}
	e := events.New(events.MessageThumbnailed, cid, sender)
	e.Seq, e.ChangeID = seq, ThumbnailChangeID(id)
	e.Thumbnail = &events.ThumbnailOf{AttachmentID: id, Thumbnail: events.Thumbnail{ContentType: "image/jpeg",
		Size: int64(len(thumb)), Width: w, Height: h}}
	if _, err := g.prod.Append(ctx, e); err != nil {
		return false, fmt.Errorf("append the thumbnail of %s: %w", id, err)
	}
	g.metrics.thumbnails.WithLabelValues("made").Inc()
	_, err = pool.Exec(ctx, sqlThumbEnd, id, "done")
	return true, err
}

// thumbnailOf reads the file at object (size bytes, sealed with key),
// and returns its thumbnail as a JPEG with its width and height.
func (g *Gateway) thumbnailOf(ctx context.Context, object string, size int64, key []byte) ([]byte, int, int, error) {
	r, err := g.cfg.Attachments.Store.Open(ctx, object)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("open %s: %w", object, err)
	}
	defer r.Close()
	var plain bytes.Buffer
	if err := sealed.Open(&plain, r, size, key); err != nil {
		if errors.Is(err, sealed.ErrOpen) {
			return nil, 0, 0, fmt.Errorf("%w: the file does not open with its key", errNoThumbnail)
		}
		return nil, 0, 0, err
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(plain.Bytes()))
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%w: %v", errNoThumbnail, err)
	}
	if cfg.Width < 1 || cfg.Height < 1 || int64(cfg.Width)*int64(cfg.Height) > maxThumbnailPixels {
		return nil, 0, 0, fmt.Errorf("%w: a canvas of %dx%d", errNoThumbnail, cfg.Width, cfg.Height)
	}
	img, _, err := image.Decode(bytes.NewReader(plain.Bytes()))
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%w: %v", errNoThumbnail, err)
	}
	b := img.Bounds()
	limit := g.cfg.Attachments.ThumbnailSize
	w, h := b.Dx(), b.Dy()
	if w > limit || h > limit {
		if w >= h {
			w, h = limit, max(1, h*limit/b.Dx())
		} else {
			w, h = max(1, w*limit/b.Dy()), limit
		}
	}
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.CatmullRom.Scale(dst, dst.Bounds(), img, b, draw.Src, nil)
	var out bytes.Buffer
	if err := jpeg.Encode(&out, dst, &jpeg.Options{Quality: 80}); err != nil {
		return nil, 0, 0, err
	}
	return out.Bytes(), w, h, nil
}

// runThumbnails makes the wanted thumbnails every interval until ctx ends.
func (g *Gateway) runThumbnails(ctx context.Context) error {
	if g.cfg.Attachments.Store == nil || g.cfg.Attachments.ThumbnailSize < 0 {
		return nil
	}
	every(ctx, g.cfg.Attachments.ThumbnailInterval, func() {
		if _, err := g.MakeThumbnails(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("making thumbnails failed; trying again at the next round", "err", err)
		}
	})
	return nil
}
