// Package sealed is the format of an attachment's bytes at rest: the
// plaintext cut into chunks of ChunkSize bytes, each sealed with
// AES-256-GCM under the attachment's own key. Clients seal before they
// upload and open after they download; the object store and its backups
// only ever hold the sealed form, so deleting the key (kept in
// PostgreSQL beside the message, like a body key) leaves every copy of
// the object unreadable.
//
// Chunks make a byte range of the plaintext readable without the rest (a
// video seeked into, a resumed download): RangeOf maps a plaintext range
// to the sealed chunks that hold it. Each chunk's nonce is its index, and
// its additional data says whether it is the last, so chunks cannot be
// reordered, and an object cut short at a chunk boundary fails to open.
//
// It is part of the wire contract (under protocol): the package depends
// on the standard library only, the Go SDK and the server share it, and
// other languages implement the same few lines (docs/protocol.md,
// "Attachments").
package sealed

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

const (
	// KeySize is the size of an attachment's key: AES-256.
	KeySize = 32
	// ChunkSize is the plaintext size of every chunk but the last.
	ChunkSize = 64 << 10
	// Overhead is what sealing adds to each chunk (the GCM tag).
	Overhead = 16
	// sealedChunk is the size of a whole sealed chunk.
	sealedChunk = ChunkSize + Overhead
)

// ErrOpen means the sealed bytes do not open with the key: the wrong key,
// or bytes changed, reordered or cut short.
var ErrOpen = errors.New("sealed: the attachment does not open with its key")

// Chunks is the number of chunks of a plaintext of size bytes (at least
// one: an empty plaintext is one empty chunk).
func Chunks(size int64) int64 {
	if size <= 0 {
		return 1
	}
	return (size + ChunkSize - 1) / ChunkSize
}

// Size is the sealed size of a plaintext of size bytes.
func Size(size int64) int64 { return size + Chunks(size)*Overhead }

// aead builds the cipher of key.
func aead(key []byte) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("sealed: key is %d bytes, want %d", len(key), KeySize)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// nonce is chunk i's nonce; ad its additional data (1 for the last chunk).
func nonce(i int64) []byte {
	n := make([]byte, 12)
	binary.BigEndian.PutUint64(n[4:], uint64(i))
	return n
}

func ad(last bool) []byte {
	if last {
		return []byte{1}
	}
	return []byte{0}
}

// Seal copies the plaintext of size bytes from r to w, sealed with key.
// It reads exactly size bytes: fewer is an error, and so is more.
func Seal(w io.Writer, r io.Reader, size int64, key []byte) error {
	if err := SealChunks(w, r, size, 0, Chunks(size), key); err != nil {
		return err
	}
	var one [1]byte
	if k, _ := r.Read(one[:]); k > 0 {
		return fmt.Errorf("sealed: more than the %d bytes declared", size)
	}
	return nil
}

// SealChunks is Seal for the chunks first to first+count-1 only of a
// plaintext of size bytes: it reads their plaintext (and nothing more)
// from r and writes them sealed to w. Chunks seal independently, so the
// parts of a multipart upload are sealed one at a time, and one is sealed
// again after a restart with the same bytes.
func SealChunks(w io.Writer, r io.Reader, size, first, count int64, key []byte) error {
	c, err := aead(key)
	if err != nil {
		return err
	}
	n := Chunks(size)
	if first < 0 || count < 0 || first+count > n {
		return fmt.Errorf("sealed: chunks %d+%d of %d", first, count, n)
	}
	buf := make([]byte, ChunkSize, sealedChunk)
	for i := first; i < first+count; i++ {
		m := int64(ChunkSize)
		if i == n-1 {
			m = size - i*ChunkSize
		}
		if _, err := io.ReadFull(r, buf[:m]); err != nil {
			return fmt.Errorf("sealed: read chunk %d: %w", i, err)
		}
		out := c.Seal(buf[:0], nonce(i), buf[:m], ad(i == n-1))
		if _, err := w.Write(out); err != nil {
			return err
		}
		buf = buf[:ChunkSize]
	}
	return nil
}

// SealedOffset is where chunk i starts in a sealed object.
func SealedOffset(i int64) int64 { return i * sealedChunk }

// Open copies the plaintext of the sealed bytes read from r, which hold
// a plaintext of size bytes, to w. Nothing of a chunk that does not open
// is written; the error is then ErrOpen.
func Open(w io.Writer, r io.Reader, size int64, key []byte) error {
	return OpenChunks(w, r, size, 0, Chunks(size), key)
}

// OpenChunks is Open for the sealed chunks first to first+count-1 only,
// read from r (what RangeOf says to fetch).
func OpenChunks(w io.Writer, r io.Reader, size, first, count int64, key []byte) error {
	c, err := aead(key)
	if err != nil {
		return err
	}
	n := Chunks(size)
	if first < 0 || count < 0 || first+count > n {
		return fmt.Errorf("sealed: chunks %d+%d of %d", first, count, n)
	}
	buf := make([]byte, sealedChunk)
	for i := first; i < first+count; i++ {
		m := int64(ChunkSize)
		if i == n-1 {
			m = size - i*ChunkSize
		}
		if _, err := io.ReadFull(r, buf[:m+Overhead]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return ErrOpen
			}
			return err
		}
		plain, err := c.Open(buf[:0], nonce(i), buf[:m+Overhead], ad(i == n-1))
		if err != nil {
			return ErrOpen
		}
		if _, err := w.Write(plain); err != nil {
			return err
		}
	}
	return nil
}

// Range is the part of a sealed object that holds a plaintext range.
type Range struct {
	// Offset and Length are the sealed bytes to fetch (an HTTP Range of
	// bytes=Offset-(Offset+Length-1)).
	Offset, Length int64
	// First and Count are the chunks they hold, for OpenChunks.
	First, Count int64
	// Skip is how many opened bytes come before the range asked for.
	Skip int64
}

// RangeOf says which sealed bytes hold the plaintext bytes off to
// off+length-1 of a plaintext of size bytes (length is cut at the end).
func RangeOf(size, off, length int64) (Range, error) {
	if off < 0 || length <= 0 || off >= size {
		return Range{}, fmt.Errorf("sealed: range %d+%d of %d bytes", off, length, size)
	}
	end := min(off+length, size) // exclusive
	first := off / ChunkSize
	last := (end - 1) / ChunkSize
	r := Range{First: first, Count: last - first + 1, Offset: first * sealedChunk, Skip: off - first*ChunkSize}
	r.Length = min(Size(size), (last+1)*sealedChunk) - r.Offset
	return r, nil
}

// Parts is the number of parts of a multipart upload of a plaintext of
// size bytes in parts of partSize plaintext bytes (a multiple of
// ChunkSize): every part but the last holds partSize/ChunkSize whole
// chunks.
func Parts(size, partSize int64) int {
	if partSize <= 0 || partSize%ChunkSize != 0 {
		return 0
	}
	return int((max(size, 1) + partSize - 1) / partSize)
}

// PartOf says which chunks part number (from 1) of such an upload holds,
// and where its sealed bytes are in the object: a part is sealed with
// SealChunks(w, r, size, p.First, p.Count, key), reading the plaintext
// from p.First*ChunkSize, and is p.Length sealed bytes.
func PartOf(size, partSize int64, number int) (Range, error) {
	n := Parts(size, partSize)
	if n == 0 || number < 1 || number > n {
		return Range{}, fmt.Errorf("sealed: part %d of %d bytes in parts of %d", number, size, partSize)
	}
	per := partSize / ChunkSize
	r := Range{First: int64(number-1) * per}
	r.Count = min(per, Chunks(size)-r.First)
	r.Offset = SealedOffset(r.First)
	r.Length = min(Size(size), SealedOffset(r.First+r.Count)) - r.Offset
	return r, nil
}

// ThumbnailKey is the key of the thumbnail of the attachment whose key is
// key: HMAC-SHA256(key, "inboxd thumbnail"). Derived, not stored: a
// thumbnail made again after a crash has the same key, and erasing the
// attachment's key erases its thumbnail's.
func ThumbnailKey(key []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("inboxd thumbnail"))
	return m.Sum(nil)
}
