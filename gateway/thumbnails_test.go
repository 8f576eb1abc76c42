package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/protocol"
	"github.com/inboxd/inboxd/protocol/sealed"
)

// TestThumbnails: an attached image gets a thumbnail, made off the send
// path, stored sealed with the key derived from the file's, and announced
// by an update entry of the message; made again after a worker died
// between its append and its bookkeeping, it is applied once. A file that
// is not an image gets none, an image that does not decode is given up,
// and a delete removes the thumbnail with the file.
func TestThumbnails(t *testing.T) {
	local := attachStores(t)["local"]
	tg := attachGateway(t, local, func(c *AttachmentsConfig) { c.ThumbnailInterval = time.Hour })
	ctx := context.Background()
	alice, bob := tg.user(t, 1), tg.user(t, 2)
	cid := alice.create(t, "photos", 2)
	db := tg.g.srv.Conv(cid)

	img := image.NewRGBA(image.Rect(0, 0, 800, 600))
	for y := 0; y < 600; y++ {
		for x := 0; x < 800; x++ {
			img.Set(x, y, color.RGBA{uint8(x), uint8(y), 90, 255})
		}
	}
	var pngBytes bytes.Buffer
	require.NoError(t, png.Encode(&pngBytes, img))
	photo := alice.upload(t, cid, "sunset.png", "image/png", pngBytes.Bytes())
	note := alice.upload(t, cid, "note.txt", "text/plain", []byte("not an image"))
	junk := make([]byte, 5000)
	_, _ = rand.Read(junk)
	broken := alice.upload(t, cid, "broken.png", "image/png", junk)
	r := alice.sendFiles(t, cid, "look", photo.ID, note.ID, broken.ID)
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	sent := decodeMsg(t, r)
	require.Nil(t, sent.Attachments[0].Thumbnail, "made off the send path")

	n, err := tg.g.MakeThumbnails(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the photo's, and the broken image given up")
	states := map[string]*string{}
	for _, id := range []string{photo.ID, note.ID, broken.ID} {
		var s *string
		require.NoError(t, db.QueryRow(ctx, `SELECT thumbnail FROM uploads WHERE id = $1`, id).Scan(&s))
		states[id] = s
	}
	require.Equal(t, "done", *states[photo.ID])
	require.Nil(t, states[note.ID], "not an image: none wanted")
	require.Equal(t, "failed", *states[broken.ID])

	// The message's update entry announces it to bob.
	var thumb *protocol.Thumbnail
	waitFor(t, 30*time.Second, "the thumbnail's update entry", func() bool {
		for _, e := range bob.sync(t, "after=0&limit=100").Entries {
			if e.Kind == protocol.KindUpdate && e.Message != nil && e.Message.MsgID == sent.MsgID {
				thumb = e.Message.Attachments[0].Thumbnail
			}
		}
		return thumb != nil
	})
	require.Equal(t, protocol.Thumbnail{ContentType: "image/jpeg", Size: thumb.Size, Width: 320, Height: 240}, *thumb)

	// Bob downloads it and opens it with the derived key.
	dl := bob.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/attachments/%s?thumbnail=true&redirect=false", cid, photo.ID), nil)
	require.Equal(t, http.StatusOK, dl.status, "%s", dl)
	var at protocol.AttachmentURL
	dl.decode(t, &at)
	require.Equal(t, thumb.Size, at.Size)
	res, err := tg.hc.Get(at.URL)
	require.NoError(t, err)
	key, err := base64.RawURLEncoding.DecodeString(photo.Key)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, sealed.Open(&out, res.Body, thumb.Size, sealed.ThumbnailKey(key)))
	res.Body.Close()
	got, err := jpeg.Decode(&out)
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, 320, 240), got.Bounds())
	r = bob.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/attachments/%s?thumbnail=true", cid, note.ID), nil)
	require.Equal(t, http.StatusNotFound, r.status, "a file with no thumbnail")
	r = bob.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/attachments/%s?thumbnail=maybe", cid, photo.ID), nil)
	require.Equal(t, http.StatusBadRequest, r.status)

	// A worker that died after its append and before its bookkeeping:
	// the thumbnail is made and appended again, and applied once.
	var version int64
	require.NoError(t, db.QueryRow(ctx, `SELECT version FROM messages WHERE msg_id = $1`, sent.MsgID).Scan(&version))
	_, err = db.Exec(ctx, `UPDATE uploads SET thumbnail = 'wanted' WHERE id = $1`, photo.ID)
	require.NoError(t, err)
	n, err = tg.g.MakeThumbnails(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	tg.env.WaitCaughtUp(t, 30*time.Second)
	var again, changes int64
	require.NoError(t, db.QueryRow(ctx, `SELECT version FROM messages WHERE msg_id = $1`, sent.MsgID).Scan(&again))
	require.Equal(t, version, again, "the same change again changes nothing")
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM changes WHERE change_id = $1`, ThumbnailChangeID(photo.ID)).Scan(&changes))
	require.EqualValues(t, 1, changes)

	// A delete removes the thumbnail with the file.
	r = alice.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/messages/%d", cid, sent.Seq), nil, "Idempotency-Key", uuid.NewString())
	require.Less(t, r.status, 300, "%s", r)
	_, err = tg.g.SweepUploads(ctx)
	require.NoError(t, err)
	store := tg.g.cfg.Attachments.Store
	for _, k := range []string{objectKey(cid, photo.ID), thumbnailObject(objectKey(cid, photo.ID))} {
		_, err := store.Stat(ctx, k)
		require.ErrorIs(t, err, attachments.ErrNotFound, k)
	}
	tg.verify(t)
}
