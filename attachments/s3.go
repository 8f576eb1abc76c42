package attachments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config locates a bucket of an S3-compatible store.
type S3Config struct {
	// Endpoint is the store's URL: http://host:port or https://host. The
	// presigned URLs point there too, unless PublicEndpoint is set.
	Endpoint string
	// PublicEndpoint, when set, is the store's URL as clients reach it,
	// when it differs from the one the gateway reaches it on (a
	// container's network, a proxy in front of the store): the URLs
	// clients get are signed for it. Signing needs no request to it.
	PublicEndpoint string
	// Bucket holds the objects; NewS3 creates it when it is missing.
	Bucket string
	// AccessKey and SecretKey sign the requests and the URLs.
	AccessKey, SecretKey string
	// Region is the bucket's region (default "us-east-1").
	Region string
}

// S3Store is a Store on an S3-compatible bucket (AWS S3, SeaweedFS,
// MinIO, Ceph), through minio-go.
type S3Store struct {
	c      *minio.Client
	pub    *minio.Client // signs the clients' URLs: c, or one on PublicEndpoint
	core   minio.Core
	tr     *http.Transport
	bucket string
}

// s3Client is a minio client of endpoint, and its transport.
func s3Client(cfg S3Config, endpoint string) (*minio.Client, *http.Transport, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" && u.Path != "/" {
		return nil, nil, fmt.Errorf("s3 endpoint %q: want http://host:port or https://host", endpoint)
	}
	tr, err := minio.DefaultTransport(u.Scheme == "https")
	if err != nil {
		return nil, nil, err
	}
	c, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       u.Scheme == "https",
		Region:       cfg.Region, // known: presigning asks the store nothing
		BucketLookup: minio.BucketLookupPath,
		Transport:    tr,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("s3 client for %s: %w", endpoint, err)
	}
	return c, tr, nil
}

// NewS3 connects to cfg's bucket, creating it when it does not exist.
func NewS3(ctx context.Context, cfg S3Config) (*S3Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3: a bucket is needed")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	c, tr, err := s3Client(cfg, cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	pub := c
	if cfg.PublicEndpoint != "" {
		if pub, _, err = s3Client(cfg, cfg.PublicEndpoint); err != nil {
			return nil, err
		}
	}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("s3: look bucket %s up: %w", cfg.Bucket, err)
	}
	if !ok {
		err := c.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region})
		if err != nil {
			// Another process may have made it meanwhile.
			if ok, err2 := c.BucketExists(ctx, cfg.Bucket); err2 != nil || !ok {
				return nil, fmt.Errorf("s3: make bucket %s: %w", cfg.Bucket, err)
			}
		}
	}
	return &S3Store{c: c, pub: pub, core: minio.Core{Client: c}, tr: tr, bucket: cfg.Bucket}, nil
}

// Close lets go of the store's idle connections.
func (s *S3Store) Close() { s.tr.CloseIdleConnections() }

// PresignPut implements Store.
func (s *S3Store) PresignPut(ctx context.Context, key string, ttl time.Duration) (string, http.Header, error) {
	u, err := s.pub.PresignedPutObject(ctx, s.bucket, key, ttl)
	if err != nil {
		return "", nil, fmt.Errorf("presign put %s: %w", key, err)
	}
	return u.String(), http.Header{}, nil
}

// PresignGet implements Store.
func (s *S3Store) PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error) {
	u, err := s.pub.PresignedGetObject(ctx, s.bucket, key, ttl, nil)
	if err != nil {
		return "", fmt.Errorf("presign get %s: %w", key, err)
	}
	return u.String(), nil
}

func notFound(err error) bool {
	var r minio.ErrorResponse
	return errors.As(err, &r) && (r.StatusCode == http.StatusNotFound || r.Code == "NoSuchKey" || r.Code == "NoSuchUpload")
}

// Stat implements Store.
func (s *S3Store) Stat(ctx context.Context, key string) (int64, error) {
	info, err := s.c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		if notFound(err) {
			return 0, ErrNotFound
		}
		return 0, fmt.Errorf("stat %s: %w", key, err)
	}
	return info.Size, nil
}

// Open implements Store.
func (s *S3Store) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	o, err := s.c.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	// GetObject is lazy: Stat makes the request, so that a missing
	// object is ErrNotFound here rather than at the first read.
	if _, err := o.Stat(); err != nil {
		o.Close()
		if notFound(err) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return o, nil
}

// Put implements Store.
func (s *S3Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	_, err := s.c.PutObject(ctx, s.bucket, key, r, size, minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Delete implements Store.
func (s *S3Store) Delete(ctx context.Context, key string) error {
	if err := s.c.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil && !notFound(err) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// Keys implements Store.
func (s *S3Store) Keys(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys, nil
}

// CreateMultipart implements Store.
func (s *S3Store) CreateMultipart(ctx context.Context, key string) (string, error) {
	id, err := s.core.NewMultipartUpload(ctx, s.bucket, key, minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return "", fmt.Errorf("create multipart upload of %s: %w", key, err)
	}
	return id, nil
}

// PresignPart implements Store.
func (s *S3Store) PresignPart(ctx context.Context, key, id string, number int, ttl time.Duration) (string, http.Header, error) {
	if number < 1 || number > MaxParts {
		return "", nil, fmt.Errorf("presign part %d of %s: parts are 1 to %d", number, key, MaxParts)
	}
	q := url.Values{"partNumber": {strconv.Itoa(number)}, "uploadId": {id}}
	u, err := s.pub.Presign(ctx, http.MethodPut, s.bucket, key, ttl, q)
	if err != nil {
		return "", nil, fmt.Errorf("presign part %d of %s: %w", number, key, err)
	}
	return u.String(), http.Header{}, nil
}

// Parts implements Store.
func (s *S3Store) Parts(ctx context.Context, key, id string) ([]Part, error) {
	var parts []Part
	marker := 0
	for {
		res, err := s.core.ListObjectParts(ctx, s.bucket, key, id, marker, 1000)
		if err != nil {
			if notFound(err) {
				return nil, ErrNotFound
			}
			return nil, fmt.Errorf("list parts of %s: %w", key, err)
		}
		for _, p := range res.ObjectParts {
			part := Part{Number: p.PartNumber, Size: p.Size, ETag: p.ETag}
			// A part PUT again is listed once by S3, but by some stores
			// (SeaweedFS) once per PUT: the last one listed stands.
			if n := len(parts); n > 0 && parts[n-1].Number == part.Number {
				parts[n-1] = part
				continue
			}
			parts = append(parts, part)
		}
		if !res.IsTruncated || res.NextPartNumberMarker <= marker {
			return parts, nil
		}
		marker = res.NextPartNumberMarker
	}
}

// CompleteMultipart implements Store.
func (s *S3Store) CompleteMultipart(ctx context.Context, key, id string, parts []Part) error {
	cp := make([]minio.CompletePart, len(parts))
	for i, p := range parts {
		cp[i] = minio.CompletePart{PartNumber: p.Number, ETag: p.ETag}
	}
	if _, err := s.core.CompleteMultipartUpload(ctx, s.bucket, key, id, cp, minio.PutObjectOptions{}); err != nil {
		if notFound(err) {
			return ErrNotFound
		}
		return fmt.Errorf("complete multipart upload of %s: %w", key, err)
	}
	return nil
}

// AbortMultipart implements Store.
func (s *S3Store) AbortMultipart(ctx context.Context, key, id string) error {
	if err := s.core.AbortMultipartUpload(ctx, s.bucket, key, id); err != nil && !notFound(err) {
		return fmt.Errorf("abort multipart upload of %s: %w", key, err)
	}
	return nil
}
