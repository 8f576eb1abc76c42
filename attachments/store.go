package attachments

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"
)

// ErrNotFound means the store holds no object under the key.
var ErrNotFound = errors.New("attachments: no such object")

// Store is where the sealed bytes of attachments live: an S3-compatible
// bucket (S3Store), or a directory served and signed by the gateway
// itself (LocalStore, for dev and tests without an object store). The
// gateway never passes an upload's or a download's bytes through its
// memory: clients PUT and GET the store directly, on URLs it signs.
// Implementations are safe for concurrent use.
type Store interface {
	// PresignPut returns a URL on which a client can PUT the object
	// under key until ttl has passed, and the headers it must send with
	// it.
	PresignPut(ctx context.Context, key string, ttl time.Duration) (url string, header http.Header, err error)
	// PresignGet returns a URL on which a client can GET the object under
	// key (byte ranges included) until ttl has passed.
	PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error)
	// Stat returns the size of the object under key, or ErrNotFound.
	Stat(ctx context.Context, key string) (int64, error)
	// Open reads the object under key (ErrNotFound when there is none).
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// Put stores the object under key from r (size bytes): the server's
	// own writes, such as thumbnails.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Delete removes the object under key; a missing one is no error.
	Delete(ctx context.Context, key string) error
	// Keys lists the keys of every object under prefix: for the sweeper
	// of expired uploads, and the checks that the store holds only what
	// it should.
	Keys(ctx context.Context, prefix string) ([]string, error)

	// CreateMultipart starts a multipart upload of the object under key
	// (a large file, sent in parts that can be resumed) and returns its
	// id.
	CreateMultipart(ctx context.Context, key string) (string, error)
	// PresignPart returns a URL on which a client can PUT part number
	// (1 to MaxParts) of the multipart upload id of key until ttl has
	// passed, and the headers it must send with it.
	PresignPart(ctx context.Context, key, id string, number int, ttl time.Duration) (string, http.Header, error)
	// Parts lists the parts the store holds of the multipart upload id
	// of key, by number; ErrNotFound when the upload is no more
	// (completed or aborted).
	Parts(ctx context.Context, key, id string) ([]Part, error)
	// CompleteMultipart makes the object under key of parts, in order;
	// the multipart upload is then no more.
	CompleteMultipart(ctx context.Context, key, id string, parts []Part) error
	// AbortMultipart drops the multipart upload id of key and its parts;
	// one that is no more is no error.
	AbortMultipart(ctx context.Context, key, id string) error
}

// MaxParts is the most parts a multipart upload has (S3's limit).
const MaxParts = 10000

// Part is a part of a multipart upload that the store holds.
type Part struct {
	Number int // from 1
	Size   int64
	ETag   string
}
