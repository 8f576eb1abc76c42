package sealed_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol/sealed"
)

func key(t *testing.T) []byte {
	k := make([]byte, sealed.KeySize)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return k
}

func TestRoundTripAndRanges(t *testing.T) {
	k := key(t)
	for _, size := range []int64{0, 1, sealed.ChunkSize - 1, sealed.ChunkSize, sealed.ChunkSize + 1, 3*sealed.ChunkSize + 17} {
		plain := make([]byte, size)
		_, _ = rand.Read(plain)
		var s bytes.Buffer
		require.NoError(t, sealed.Seal(&s, bytes.NewReader(plain), size, k))
		require.EqualValues(t, sealed.Size(size), s.Len(), "size %d", size)
		require.False(t, size > 16 && bytes.Contains(s.Bytes(), plain[:16]), "the plaintext shows through")
		var o bytes.Buffer
		require.NoError(t, sealed.Open(&o, bytes.NewReader(s.Bytes()), size, k))
		require.True(t, bytes.Equal(plain, o.Bytes()), "size %d opens to its plaintext", size)
		// Every range opens from its chunks alone.
		for _, rg := range [][2]int64{{0, 1}, {size / 2, 10}, {size - 1, 1}, {sealed.ChunkSize - 3, 7}, {0, size + 5}} {
			if rg[0] < 0 || rg[0] >= size {
				continue
			}
			r, err := sealed.RangeOf(size, rg[0], rg[1])
			require.NoError(t, err)
			var got bytes.Buffer
			require.NoError(t, sealed.OpenChunks(&got, bytes.NewReader(s.Bytes()[r.Offset:r.Offset+r.Length]), size, r.First, r.Count, k))
			end := min(rg[0]+rg[1], size)
			require.Equal(t, plain[rg[0]:end], got.Bytes()[r.Skip:r.Skip+end-rg[0]], "size %d range %v", size, rg)
		}
	}
}

func TestRefusesWhatWasChanged(t *testing.T) {
	k := key(t)
	size := int64(2*sealed.ChunkSize + 5)
	plain := make([]byte, size)
	var s bytes.Buffer
	require.NoError(t, sealed.Seal(&s, bytes.NewReader(plain), size, k))
	open := func(b []byte, k []byte) error {
		return sealed.Open(&bytes.Buffer{}, bytes.NewReader(b), size, k)
	}
	require.ErrorIs(t, open(s.Bytes(), key(t)), sealed.ErrOpen, "another key")
	flipped := bytes.Clone(s.Bytes())
	flipped[100] ^= 1
	require.ErrorIs(t, open(flipped, k), sealed.ErrOpen, "a flipped bit")
	require.ErrorIs(t, open(s.Bytes()[:2*(sealed.ChunkSize+sealed.Overhead)], k), sealed.ErrOpen, "cut at a chunk boundary")
	// Cut at a boundary and declared shorter: the chunk before is not the last.
	err := sealed.Open(&bytes.Buffer{}, bytes.NewReader(s.Bytes()[:sealed.ChunkSize+sealed.Overhead]), sealed.ChunkSize, k)
	require.ErrorIs(t, err, sealed.ErrOpen, "a first chunk passed off as the last")
	swapped := append(bytes.Clone(s.Bytes()[sealed.ChunkSize+sealed.Overhead:2*(sealed.ChunkSize+sealed.Overhead)]), s.Bytes()[:sealed.ChunkSize+sealed.Overhead]...)
	swapped = append(swapped, s.Bytes()[2*(sealed.ChunkSize+sealed.Overhead):]...)
	require.ErrorIs(t, open(swapped, k), sealed.ErrOpen, "chunks reordered")
	require.Error(t, sealed.Seal(&bytes.Buffer{}, bytes.NewReader(plain), size-1, k), "more than declared")
	err = sealed.Seal(&bytes.Buffer{}, bytes.NewReader(plain), size+1, k)
	require.Error(t, err, "less than declared")
	require.False(t, errors.Is(err, sealed.ErrOpen))
}

// The vector other languages are held to (the TypeScript SDK's
// test/unit/attachments.test.ts checks the same figures): key 0..31,
// 70,000 bytes of i*7 mod 251. GCM under a fixed key and nonce is
// deterministic, so a sealed file is the same bytes in every language.
func TestSealedVector(t *testing.T) {
	key := make([]byte, sealed.KeySize)
	for i := range key {
		key[i] = byte(i)
	}
	plain := make([]byte, 70000)
	for i := range plain {
		plain[i] = byte(i * 7 % 251)
	}
	var b bytes.Buffer
	require.NoError(t, sealed.Seal(&b, bytes.NewReader(plain), int64(len(plain)), key))
	require.Equal(t, 70032, b.Len())
	sum := sha256.Sum256(b.Bytes())
	require.Equal(t, "6ed1b597c26dfa228e7c984caff3f97e309e2eb4915095cd1e6b35b69963963a", hex.EncodeToString(sum[:]))
	require.Equal(t, "d7715791d950342d31fbd9d9ca8bae1a64ea0227c6495fa548c0efdf2b13df63", hex.EncodeToString(sealed.ThumbnailKey(key)))
}
