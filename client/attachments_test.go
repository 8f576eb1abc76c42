package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"image"
	"image/jpeg"
	pngenc "image/png"
	"sync"
	"sync/atomic"
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

// failingAt is a file whose reads fail from byte at on: a disk or a
// process that goes away part way through an upload.
type failingAt struct {
	*bytes.Reader
	at   int64
	read atomic.Int64
}

func (f *failingAt) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.at {
		return 0, errors.New("the file went away")
	}
	n, err := f.Reader.ReadAt(p, off)
	f.read.Add(int64(n))
	return n, err
}

// TestUploadResumesInParts: a large file goes in parts; the upload dies
// part way; a new client (the app restarted) that kept only the upload's
// id resumes it, sending only the parts the store lacks, and the file
// arrives whole.
func TestUploadResumesInParts(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 store")
	}
	noClientGoroutines(t)
	store, _ := s3test.Store(t)
	w := newWorld(t, func(c *gateway.Config) {
		c.Attachments.Store, c.Attachments.ThumbnailInterval = store, time.Hour
		c.Attachments.PartSize = gateway.MinUploadPartSize
	}, nil)
	ctx := context.Background()
	size := int64(2*gateway.MinUploadPartSize + 4321)
	file := make([]byte, size)
	_, _ = rand.Read(file)

	a := newApp()
	alice, err := client.New(w.config(t, w.url, 1, a))
	require.NoError(t, err)
	cid, err := alice.CreateConversation(ctx, "large", 2)
	require.NoError(t, err)
	var kept string
	broken := &failingAt{Reader: bytes.NewReader(file), at: gateway.MinUploadPartSize + 1000}
	_, err = alice.Upload(ctx, cid, client.UploadFile{Name: "film.mp4", ContentType: "video/mp4", Size: size,
		Body: broken, Created: func(up client.Upload) { kept = up.ID }})
	var ue *client.UploadError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, kept, ue.ID)

	// The app again, with the same file and the kept id.
	b := newApp()
	again, err := client.New(w.config(t, w.url, 1, b))
	require.NoError(t, err)
	rb := start(t, again, b)
	body := &failingAt{Reader: bytes.NewReader(file), at: size}
	var first int64 = -1
	up, err := again.ResumeUpload(ctx, cid, kept, client.UploadFile{Size: size, Body: body,
		Progress: func(sent, total int64) {
			if first < 0 {
				first = sent
			}
		}})
	require.NoError(t, err)
	require.Equal(t, "uploaded", up.State)
	require.LessOrEqual(t, body.read.Load(), size-gateway.MinUploadPartSize, "the part the store held is not read again")
	require.Greater(t, first, int64(gateway.MinUploadPartSize), "progress starts after what was in")
	up, err = again.ResumeUpload(ctx, cid, kept, client.UploadFile{Size: size, Body: body})
	require.NoError(t, err, "a resume of a whole upload is a no-op")
	require.Equal(t, "uploaded", up.State)

	id, err := again.SendWith(ctx, cid, "", client.SendOptions{Attachments: []string{kept}})
	require.NoError(t, err)
	res, err := rb.c.WaitSent(ctx, id)
	require.NoError(t, err)
	require.Len(t, res.Message.Attachments, 1)
	var out bytes.Buffer
	require.NoError(t, again.Download(ctx, cid, res.Message.Attachments[0], &out))
	require.True(t, bytes.Equal(file, out.Bytes()), "the file arrives whole")
	require.NoError(t, rb.stop())
}
