package bench

import (
	"bytes"
	"image/jpeg"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway"
)

// The bench's photo is a JPEG of the size asked for, near the bytes asked
// for, the same for the same seed; the reference's thumbnail fits the
// gateway's longest side.
func TestPhotoThumbnail(t *testing.T) {
	photo, q, err := photoJPEG(640, 480, 60_000, 1)
	require.NoError(t, err)
	again, _, err := photoJPEG(640, 480, 60_000, 1)
	require.NoError(t, err)
	require.Equal(t, photo, again)
	require.InDelta(t, 60_000, len(photo), 15_000, "quality %d", q)
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(photo))
	require.NoError(t, err)
	require.Equal(t, 640, cfg.Width)
	require.Equal(t, 480, cfg.Height)

	thumb, err := thumbnailWork(photo, gateway.DefaultThumbnailSize)
	require.NoError(t, err)
	tc, err := jpeg.DecodeConfig(bytes.NewReader(thumb))
	require.NoError(t, err)
	require.Equal(t, gateway.DefaultThumbnailSize, tc.Width)
	require.Equal(t, gateway.DefaultThumbnailSize*480/640, tc.Height)
}
