package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"flag"
	"net"
	"strings"
	"time"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/config"
)

// attachmentFlags are the gateway's settings of attachments
// (docs/protocol.md, "Attachments"; docs/operations.md, "Attachments").
type attachmentFlags struct {
	s3Endpoint, s3Bucket, s3AccessKey, s3SecretKey, s3Region string
	s3Public                                                 string
	dir, publicURL, secret                                   string
	maxSize, quotaBytes, partSize                            int64
	types                                                    string
	quotaFiles                                               int
	expiry, urlExpiry, downloadExpiry, sweep                 time.Duration
	thumbInterval, thumbLease                                time.Duration
	thumbSize                                                int
}

func (f *attachmentFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.s3Endpoint, "s3-endpoint", "", "URL of the S3-compatible object store of attachments (http://host:port or https://host); clients PUT and GET it on presigned URLs signed for this URL too, unless --s3-public-endpoint; empty: see --attachments-dir")
	fs.StringVar(&f.s3Public, "s3-public-endpoint", "", "the object store's URL as clients reach it, when it is not --s3-endpoint (the gateway reaches the store on --s3-endpoint and signs the clients' URLs for this one)")
	fs.StringVar(&f.s3Bucket, "s3-bucket", "inboxd", "bucket of the attachments (made when missing)")
	fs.StringVar(&f.s3AccessKey, "s3-access-key", "", "access key of the object store")
	fs.StringVar(&f.s3SecretKey, "s3-secret-key", "", "secret key of the object store")
	fs.StringVar(&f.s3Region, "s3-region", "us-east-1", "region of the bucket")
	fs.StringVar(&f.dir, "attachments-dir", "", "keep attachments in this directory and serve them on URLs the gateway signs (/v1/blobs/), when there is no --s3-endpoint; dev's default is <data-dir>/attachments; empty and no --s3-endpoint: attachments off")
	fs.StringVar(&f.publicURL, "public-url", "", "the gateway's URL as clients reach it, which --attachments-dir's signed URLs point at (default http:// and --http-addr, with localhost for an empty host)")
	fs.StringVar(&f.secret, "attachments-secret", "", "secret signing --attachments-dir's URLs (default: derived from --auth-secret; needed with --auth-jwks-url alone); every gateway serving the directory must share it")
	fs.Int64Var(&f.maxSize, "attachment-max-size", gateway.DefaultAttachmentMaxSize, "largest attachment, in bytes (413 above)")
	fs.Int64Var(&f.partSize, "upload-part-size", gateway.DefaultUploadPartSize, "plaintext bytes per part of an upload in parts (a multipart upload, for large files), but the last: a multiple of 65536, at least 5 MiB (S3's least part)")
	fs.StringVar(&f.types, "attachment-types", "", "comma-separated media types accepted as attachments, each exact or type/* (empty: every type)")
	fs.Int64Var(&f.quotaBytes, "upload-quota-bytes", gateway.DefaultUploadQuotaBytes, "bytes a user may have uploaded and not attached yet")
	fs.IntVar(&f.quotaFiles, "upload-quota-files", gateway.DefaultUploadQuotaFiles, "uploads a user may have and not attached yet")
	fs.DurationVar(&f.expiry, "upload-expiry", gateway.DefaultUploadExpiry, "an upload not attached to a message within this is removed")
	fs.DurationVar(&f.urlExpiry, "upload-url-expiry", gateway.DefaultUploadURLExpiry, "life of an upload's presigned PUT URL")
	fs.DurationVar(&f.downloadExpiry, "download-url-expiry", gateway.DefaultDownloadURLExpiry, "life of a download's presigned GET URL")
	fs.DurationVar(&f.sweep, "upload-sweep-interval", gateway.DefaultSweepInterval, "how often the objects of expired uploads and deleted messages' files are removed")
	fs.DurationVar(&f.thumbInterval, "thumbnail-interval", gateway.DefaultThumbnailInterval, "how often this gateway's thumbnail worker looks for attached images without one (a lone image waits half of it on average)")
	fs.DurationVar(&f.thumbLease, "thumbnail-lease", gateway.DefaultThumbnailLease, "how long a thumbnail taken by a worker is its own: one killed or failing mid-way leaves it to another worker after this")
	fs.IntVar(&f.thumbSize, "thumbnail-size", gateway.DefaultThumbnailSize, "longest side in pixels of the JPEG thumbnails this gateway makes of attached JPEG, PNG, GIF and WebP images (negative: makes none; other gateways may)")
}

// config is the gateway's AttachmentsConfig, its store opened (or none).
// authSecret derives --attachments-dir's signing secret when none is
// given; httpAddr makes its default public URL.
func (f *attachmentFlags) config(ctx context.Context, authSecret, httpAddr string) (gateway.AttachmentsConfig, error) {
	cfg := gateway.AttachmentsConfig{MaxSize: f.maxSize, Types: config.SplitList(f.types), QuotaBytes: f.quotaBytes,
		QuotaFiles: f.quotaFiles, UploadExpiry: f.expiry, UploadURLExpiry: f.urlExpiry, DownloadURLExpiry: f.downloadExpiry,
		SweepInterval: f.sweep, ThumbnailSize: f.thumbSize, PartSize: f.partSize,
		ThumbnailInterval: f.thumbInterval, ThumbnailLease: f.thumbLease}
	switch {
	case f.s3Endpoint != "":
		st, err := attachments.NewS3(ctx, attachments.S3Config{Endpoint: f.s3Endpoint, Bucket: f.s3Bucket,
			AccessKey: f.s3AccessKey, SecretKey: f.s3SecretKey, Region: f.s3Region, PublicEndpoint: f.s3Public})
		if err != nil {
			return cfg, err
		}
		cfg.Store = st
	case f.dir != "":
		secret := []byte(f.secret)
		if len(secret) == 0 {
			if authSecret == "" {
				return cfg, errors.New("--attachments-dir needs --attachments-secret (or --auth-secret to derive it from)")
			}
			m := hmac.New(sha256.New, []byte(authSecret))
			m.Write([]byte("inboxd attachments-dir URLs"))
			secret = m.Sum(nil)
		}
		base := f.publicURL
		if base == "" {
			host, port, err := net.SplitHostPort(httpAddr)
			if err != nil {
				return cfg, err
			}
			if host == "" || host == "0.0.0.0" || host == "::" {
				host = "localhost"
			}
			base = "http://" + net.JoinHostPort(host, port)
		}
		st, err := attachments.NewLocal(f.dir, strings.TrimSuffix(base, "/"), secret)
		if err != nil {
			return cfg, err
		}
		cfg.Store = st
	}
	return cfg, nil
}
