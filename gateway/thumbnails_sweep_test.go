package gateway

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/internal/s3test"
)

// beforeThumbnailPut is a store that runs a hook before it stores a
// thumbnail.
type beforeThumbnailPut struct {
	attachments.Store
	hook func()
}

func (s beforeThumbnailPut) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if strings.HasSuffix(key, "-thumb") && s.hook != nil {
		s.hook()
	}
	return s.Store.Put(ctx, key, r, size)
}

// TestThumbnailOfMessageDeletedMeanwhile: the message of an image is
// deleted, and the sweeper comes round, while a worker makes its
// thumbnail. The sweeper leaves the upload to the worker until the
// thumbnail is stored, then removes both: no thumbnail is left in the
// store without a row to find it by.
func TestThumbnailOfMessageDeletedMeanwhile(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 store")
	}
	var hook func()
	tg := attachGateway(t, func(t *testing.T, _ string) attachments.Store {
		st, _ := s3test.Store(t)
		return beforeThumbnailPut{Store: st, hook: func() { hook() }}
	}, func(c *AttachmentsConfig) { c.ThumbnailInterval, c.SweepInterval = time.Hour, time.Hour })
	ctx := context.Background()
	alice := tg.user(t, 1)
	cid := alice.create(t, "photos", 2)
	var img bytes.Buffer
	require.NoError(t, png.Encode(&img, image.NewGray(image.Rect(0, 0, 50, 40))))
	photo := alice.upload(t, cid, "photo.png", "image/png", img.Bytes())
	sent := decodeMsg(t, alice.sendFiles(t, cid, "look", photo.ID))

	swept := -1
	hook = func() {
		r := alice.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/messages/%d", cid, sent.Seq), nil, "Idempotency-Key", uuid.NewString())
		require.Less(t, r.status, 300, "%s", r)
		var err error
		swept, err = tg.g.SweepUploads(ctx)
		require.NoError(t, err)
	}
	_, err := tg.g.MakeThumbnails(ctx)
	require.NoError(t, err)
	require.Zero(t, swept, "the sweeper leaves an upload whose thumbnail is being stored")
	n, err := tg.g.SweepUploads(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "then removes it")
	keys, err := tg.g.cfg.Attachments.Store.Keys(ctx, "")
	require.NoError(t, err)
	require.Empty(t, keys, "neither the file nor its thumbnail is left")
	tg.verify(t)
}
