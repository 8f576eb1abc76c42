package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"image"
	"image/jpeg"
	pngenc "image/png"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/s3test"
	"github.com/inboxd/inboxd/protocol/sealed"
)

// TestAttachmentsThroughTheClient: a client uploads a file straight to a
// real S3 store (sealed on the way, with progress), sends it with no text
// over each transport, and another member's client gets the message with
// the file's description and downloads the file it describes.
func TestAttachmentsThroughTheClient(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 store")
	}
	for _, tr := range []client.Transport{client.TransportWebSocket, client.TransportPolling} {
		t.Run(tr.String(), func(t *testing.T) {
			noClientGoroutines(t)
			store, _ := s3test.Store(t)
			// The test makes the thumbnails itself (MakeThumbnails), not the
			// gateway's worker.
			w := newWorld(t, func(c *gateway.Config) {
				c.Attachments.Store, c.Attachments.ThumbnailInterval = store, time.Hour
			}, nil)
			ctx := context.Background()

			a, b := newApp(), newApp()
			ca := w.config(t, w.url, 1, a)
			ca.Transport = tr
			alice, err := client.New(ca)
			require.NoError(t, err)
			cid, err := alice.CreateConversation(ctx, "files", 2)
			require.NoError(t, err)
			ra := start(t, alice, a)
			cb := w.config(t, w.url, 2, b)
			cb.Transport = tr
			bob, err := client.New(cb)
			require.NoError(t, err)
			rb := start(t, bob, b)

			file := make([]byte, 3*sealed.ChunkSize+123)
			_, _ = rand.Read(file)
			sum := sha256.Sum256(file)
			var mu sync.Mutex
			var reports []int64
			up, err := alice.Upload(ctx, cid, client.UploadFile{Name: "clip.mp4", ContentType: "video/mp4",
				Size: int64(len(file)), Body: bytes.NewReader(file), SHA256: hex.EncodeToString(sum[:]),
				Progress: func(sent, total int64) {
					mu.Lock()
					reports = append(reports, sent)
					mu.Unlock()
					require.Equal(t, sealed.Size(int64(len(file))), total)
				}})
			require.NoError(t, err)
			mu.Lock()
			require.NotEmpty(t, reports)
			require.Equal(t, sealed.Size(int64(len(file))), reports[len(reports)-1], "progress ends at the sealed size")
			mu.Unlock()

			id, err := alice.SendWith(ctx, cid, "", client.SendOptions{Attachments: []string{up.ID}})
			require.NoError(t, err)
			res, err := ra.c.WaitSent(ctx, id)
			require.NoError(t, err)
			require.Len(t, res.Message.Attachments, 1)

			// Bob's client delivers the message; he downloads the file.
			converge(t, w, 2, rb, nil)
			var got *client.Message
			for _, e := range b.snapshot() {
				if e.Message != nil && e.Message.MsgID == id {
					got = e.Message
				}
			}
			require.NotNil(t, got, "bob's client delivered the message")
			require.Len(t, got.Attachments, 1)
			att := got.Attachments[0]
			require.Equal(t, "clip.mp4", att.Name)
			require.Equal(t, hex.EncodeToString(sum[:]), att.SHA256)
			var out bytes.Buffer
			require.NoError(t, bob.Download(ctx, cid, att, &out))
			require.True(t, bytes.Equal(file, out.Bytes()))

			// A key that is not the file's does not open it.
			bad := att
			bad.Key = up.Key[:len(up.Key)-2] + "AA"
			require.ErrorIs(t, bob.Download(ctx, cid, bad, &bytes.Buffer{}), sealed.ErrOpen)

			// An image's thumbnail.
			var png bytes.Buffer
			img := image.NewGray(image.Rect(0, 0, 640, 64))
			require.NoError(t, pngenc.Encode(&png, img))
			photo, err := alice.Upload(ctx, cid, client.UploadFile{Name: "strip.png", ContentType: "image/png",
				Size: int64(png.Len()), Body: bytes.NewReader(png.Bytes())})
			require.NoError(t, err)
			id, err = alice.SendWith(ctx, cid, "a photo", client.SendOptions{Attachments: []string{photo.ID}})
			require.NoError(t, err)
			_, err = ra.c.WaitSent(ctx, id)
			require.NoError(t, err)
			n, err := w.g.MakeThumbnails(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			// It reaches bob as an update of the message, or with the
			// message itself when his client reads it after the thumbnail.
			var updated client.Attachment
			waitFor(t, 30*time.Second, "the thumbnail at bob's client", func() bool {
				b.mu.Lock()
				defer b.mu.Unlock()
				seen := append([]client.Message(nil), b.updates...)
				for _, e := range b.entries {
					if e.Message != nil {
						seen = append(seen, *e.Message)
					}
				}
				for _, m := range seen {
					if m.MsgID == id && m.Attachments[0].Thumbnail != nil {
						updated = m.Attachments[0]
						return true
					}
				}
				return false
			})
			var thumb bytes.Buffer
			require.NoError(t, bob.DownloadThumbnail(ctx, cid, updated, &thumb))
			shown, err := jpeg.Decode(&thumb)
			require.NoError(t, err)
			require.Equal(t, image.Rect(0, 0, 320, 32), shown.Bounds())
			require.NoError(t, ra.stop())
			require.NoError(t, rb.stop())
		})
	}
}
