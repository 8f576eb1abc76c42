package gateway

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/write"
	"github.com/inboxd/inboxd/protocol"
	"github.com/inboxd/inboxd/protocol/sealed"
)

// Attachments (docs/protocol.md, "Attachments"): a member asks for an
// upload and gets a key and a presigned URL; it seals the file with the
// key and PUTs it straight to the object store; a send attaches finished
// uploads (package write claims them); a reader whose membership covers
// the message is redirected to a presigned GET of the sealed object and
// opens it with the key the message carries. No file passes through the
// gateway.

// Defaults of AttachmentsConfig.
const (
	DefaultAttachmentMaxSize = 100 << 20
	DefaultUploadQuotaBytes  = 1 << 30
	DefaultUploadQuotaFiles  = 100
	DefaultUploadExpiry      = 24 * time.Hour
	DefaultUploadURLExpiry   = 15 * time.Minute
	DefaultDownloadURLExpiry = 5 * time.Minute
	DefaultThumbnailInterval = time.Second
	DefaultUploadPartSize    = 8 << 20
	// MinUploadPartSize is S3's least size of a part but the last.
	MinUploadPartSize = 5 << 20
)

// AttachmentsConfig is the configuration of attachments.
type AttachmentsConfig struct {
	// Store holds the sealed files; nil: attachments are off (the upload
	// and download routes answer 404, and a send that attaches gets 400).
	Store attachments.Store
	// MaxSize is the largest file, in bytes. Default DefaultAttachmentMaxSize.
	MaxSize int64
	// Types are the media types allowed, each exact ("application/pdf")
	// or a whole family ("image/*"); empty: every type.
	Types []string
	// QuotaBytes and QuotaFiles bound what one user has uploaded and not
	// attached yet (its open uploads). Defaults DefaultUploadQuotaBytes,
	// DefaultUploadQuotaFiles.
	QuotaBytes int64
	QuotaFiles int
	// UploadExpiry is how long an upload may wait to be attached before
	// the sweeper removes it. Default DefaultUploadExpiry.
	UploadExpiry time.Duration
	// UploadURLExpiry and DownloadURLExpiry are the lives of the presigned
	// URLs. Defaults DefaultUploadURLExpiry, DefaultDownloadURLExpiry.
	UploadURLExpiry, DownloadURLExpiry time.Duration
	// SweepInterval is how often the objects of expired and erased
	// uploads are removed. Default DefaultSweepInterval.
	SweepInterval time.Duration
	// ThumbnailSize is the longest side of a thumbnail, in pixels
	// (default DefaultThumbnailSize; negative: no thumbnails made here).
	// ThumbnailInterval is how often the worker looks for wanted ones
	// (default DefaultThumbnailInterval), ThumbnailLease how long a taken
	// one is a worker's before another may take it over (default
	// DefaultThumbnailLease).
	ThumbnailSize                     int
	ThumbnailInterval, ThumbnailLease time.Duration
	// PartSize is the plaintext size of each part of a multipart upload
	// but the last: a multiple of the sealed chunk size (64 KiB), at
	// least MinUploadPartSize. Default DefaultUploadPartSize.
	PartSize int64
}

func (c *AttachmentsConfig) setDefaults() {
	setDefault(&c.MaxSize, DefaultAttachmentMaxSize)
	setDefault(&c.QuotaBytes, DefaultUploadQuotaBytes)
	setDefault(&c.QuotaFiles, DefaultUploadQuotaFiles)
	setDefault(&c.UploadExpiry, DefaultUploadExpiry)
	setDefault(&c.UploadURLExpiry, DefaultUploadURLExpiry)
	setDefault(&c.DownloadURLExpiry, DefaultDownloadURLExpiry)
	setDefault(&c.SweepInterval, DefaultSweepInterval)
	setDefault(&c.ThumbnailSize, DefaultThumbnailSize)
	setDefault(&c.ThumbnailInterval, DefaultThumbnailInterval)
	setDefault(&c.ThumbnailLease, DefaultThumbnailLease)
	setDefault(&c.PartSize, DefaultUploadPartSize)
}

func (c *AttachmentsConfig) validate() error {
	switch {
	case c.MaxSize < 1:
		return errors.New("gateway: the largest attachment must be at least a byte")
	case c.UploadURLExpiry > c.UploadExpiry:
		return errors.New("gateway: an upload URL cannot outlive its upload")
	case c.ThumbnailInterval <= 0 || c.ThumbnailLease <= 0 || c.SweepInterval <= 0:
		return errors.New("gateway: the thumbnail interval and lease and the sweep interval must be positive")
	case c.PartSize < MinUploadPartSize || c.PartSize%sealed.ChunkSize != 0:
		return fmt.Errorf("gateway: the part size must be a multiple of %d bytes, at least %d", sealed.ChunkSize, MinUploadPartSize)
	}
	for _, t := range c.Types {
		if t == "*/*" {
			continue
		}
		if err := events.ValidContentType(strings.TrimSuffix(t, "*") + "x"); err != nil {
			return fmt.Errorf("gateway: attachment type %q: want type/subtype or type/*", t)
		}
	}
	return nil
}

// allows says whether a file of content type ct may be uploaded.
func (c *AttachmentsConfig) allows(ct string) bool {
	if len(c.Types) == 0 {
		return true
	}
	for _, t := range c.Types {
		if t == ct || t == "*/*" || strings.HasSuffix(t, "/*") && strings.HasPrefix(ct, strings.TrimSuffix(t, "*")) {
			return true
		}
	}
	return false
}

// objectKey is where an upload's sealed file lives in the store: one
// path segment, prefixed so that a bucket shared with other uses lists
// inboxd's objects apart.
func objectKey(cid int64, id string) string { return fmt.Sprintf("inboxd-%d-%s", cid, id) }

const (
	// sqlUploadCheck: is the user a member, and how much it has open.
	sqlUploadCheck = `SELECT EXISTS (SELECT 1 FROM conversations WHERE id = $1),
	EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $1 AND user_id = $2 AND left_seq IS NULL),
	(SELECT count(*) FROM uploads WHERE user_id = $2 AND state = 'open'),
	(SELECT COALESCE(sum(size), 0) FROM uploads WHERE user_id = $2 AND state = 'open')`
	sqlInsertUpload = `INSERT INTO uploads (id, conversation_id, user_id, name, content_type, size, sha256, width, height,
	key, object_key, expires_at, multipart_id)
VALUES ($1, $2, $3, $4, $5, $6, NULLIF($7, ''), NULLIF($8, 0), NULLIF($9, 0), $10, $11, $12, $13)`
)

// handleCreateUpload is POST /v1/conversations/{cid}/uploads.
func (g *Gateway) handleCreateUpload(w http.ResponseWriter, r *http.Request) error {
	err := g.createUpload(w, r)
	if err == nil {
		g.metrics.uploads.WithLabelValues("created").Inc()
	} else if e := apierr.From(err); e.Status < 500 {
		g.metrics.uploads.WithLabelValues("refused").Inc()
	}
	return err
}

// attachmentsOf is the conversation of an attachment route, when the
// server keeps attachments (404 when it has no store).
func (g *Gateway) attachmentsOf(r *http.Request) (int64, error) {
	if g.cfg.Attachments.Store == nil {
		return 0, apierr.NotFound("attachments are not enabled on this server")
	}
	return pathID(r, "cid")
}

func (g *Gateway) createUpload(w http.ResponseWriter, r *http.Request) error {
	ac := &g.cfg.Attachments
	cid, err := g.attachmentsOf(r)
	if err != nil {
		return err
	}
	var req protocol.UploadRequest
	if err := g.decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := checkUpload(ac, &req); err != nil {
		return err
	}
	user := userFrom(r.Context())
	ctx := r.Context()
	pool := g.srv.Conv(cid)
	var exists, member bool
	var files, bytes int64
	if err := pool.QueryRow(ctx, sqlUploadCheck, cid, user).Scan(&exists, &member, &files, &bytes); err != nil {
		return fmt.Errorf("upload check of user %d in %d: %w", user, cid, err)
	}
	switch {
	case !exists:
		return apierr.NotFound("conversation %d does not exist", cid)
	case !member:
		return apierr.NotMember("user %d is not a member of conversation %d", user, cid)
	case files >= int64(ac.QuotaFiles):
		return apierr.Forbidden("upload quota: %d uploads not attached yet (at most %d); attach or let them expire", files, ac.QuotaFiles)
	case bytes+req.Size > ac.QuotaBytes:
		return apierr.Forbidden("upload quota: %d bytes not attached yet, %d more would pass %d", bytes, req.Size, ac.QuotaBytes)
	}
	id := uuid.NewString()
	key := make([]byte, sealed.KeySize)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	u := uploadRow{id: id, cid: cid, user: user, name: req.Name, contentType: req.ContentType, size: req.Size,
		sha256: req.SHA256, width: req.Width, height: req.Height, key: key, object: objectKey(cid, id),
		state: "open", expiresAt: time.Now().Add(ac.UploadExpiry).UTC().Truncate(time.Microsecond)}
	if req.Multipart {
		if u.multipart, err = ac.Store.CreateMultipart(ctx, u.object); err != nil {
			return apierr.Unavailable("the object store could not start the upload", time.Second, err)
		}
	}
	// The row is written before the answer and after the store's
	// multipart upload: a crash between the two leaves an empty multipart
	// upload the store's own lifecycle rule removes (docs/operations.md,
	// "Attachments"), never a row the sweeper cannot clean.
	if _, err := pool.Exec(ctx, sqlInsertUpload, id, cid, user, req.Name, req.ContentType, req.Size, req.SHA256,
		req.Width, req.Height, key, u.object, u.expiresAt, nullIfEmpty(u.multipart)); err != nil {
		return fmt.Errorf("store upload %s: %w", id, err)
	}
	up, err := g.describeUpload(ctx, &u, true)
	if err != nil {
		return err
	}
	apierr.WriteJSON(w, http.StatusCreated, up)
	return nil
}

// checkUpload validates an upload request against the deployment's rules.
func checkUpload(ac *AttachmentsConfig, req *protocol.UploadRequest) error {
	if err := events.ValidFileName(req.Name); err != nil {
		return apierr.BadRequest("name is not a file name: %s", invalidReason(err))
	}
	if err := events.ValidContentType(req.ContentType); err != nil {
		return apierr.BadRequest("content_type is not a media type: %s", invalidReason(err))
	}
	if req.Size < 1 {
		return apierr.BadRequest("size must be a positive number of bytes")
	}
	if req.Size > ac.MaxSize {
		return apierr.TooLarge("a file of %d bytes is over the limit of %d", req.Size, ac.MaxSize)
	}
	if !ac.allows(req.ContentType) {
		return apierr.BadRequest("files of type %s are not accepted here", req.ContentType)
	}
	if req.SHA256 != "" && !events.ValidSHA256(req.SHA256) {
		return apierr.BadRequest("sha256 must be 64 lowercase hex digits")
	}
	if !events.ValidDimensions(req.Width, req.Height) {
		return apierr.BadRequest("width and height must be 0..65536")
	}
	if req.Multipart && sealed.Parts(req.Size, ac.PartSize) > attachments.MaxParts {
		return apierr.TooLarge("a file of %d bytes is more than %d parts of %d", req.Size, attachments.MaxParts, ac.PartSize)
	}
	return nil
}

// invalidReason is the reason of an events validation error.
func invalidReason(err error) string {
	var ie *events.InvalidError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	return err.Error()
}

// sqlAttachmentOf reads what a download needs: whether the conversation
// exists and the reader was ever a member, then the attachment's object,
// sizes and message, and whether a span of the reader covers it.
const (
	sqlDownloadCheck = sqlEverMember
	sqlAttachmentOf  = `SELECT u.object_key, u.size,
	(SELECT (a->'thumbnail'->>'size')::bigint FROM jsonb_array_elements(m.attachments) a WHERE a->>'id' = $1::uuid::text),
	EXISTS (SELECT 1 FROM member_spans s WHERE s.conversation_id = m.conversation_id AND s.user_id = $3
		AND s.joined_seq <= m.seq AND (s.left_seq IS NULL OR s.left_seq >= m.seq))
FROM uploads u JOIN messages m ON m.msg_id = u.msg_id
WHERE u.id = $1::uuid AND u.conversation_id = $2 AND m.conversation_id = $2 AND u.state = 'attached' AND NOT m.deleted`
)

// handleDownload is GET /v1/conversations/{cid}/attachments/{id}: 302 to
// a presigned GET of the sealed file (or, with ?redirect=false, that URL
// as JSON), for a reader whose membership covers the message.
func (g *Gateway) handleDownload(w http.ResponseWriter, r *http.Request) error {
	ac := &g.cfg.Attachments
	cid, err := g.attachmentsOf(r)
	if err != nil {
		return err
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil || len(r.PathValue("id")) != 36 {
		return apierr.BadRequest("id must be an attachment id (a uuid)")
	}
	q := r.URL.Query()
	redirect, err := queryBool(q, "redirect", true)
	if err != nil {
		return err
	}
	thumbnail, err := queryBool(q, "thumbnail", false)
	if err != nil {
		return err
	}
	user := userFrom(r.Context())
	ctx := r.Context()
	pool := g.srv.Conv(cid)
	var exists, member bool
	if err := pool.QueryRow(ctx, sqlDownloadCheck, cid, user).Scan(&exists, &member); err != nil {
		return fmt.Errorf("membership of user %d in %d: %w", user, cid, err)
	}
	if !exists {
		return apierr.NotFound("conversation %d does not exist", cid)
	}
	if !member {
		return apierr.NotMember("user %d was never a member of conversation %d", user, cid)
	}
	var obj string
	var size int64
	var thumbSize *int64
	var covered bool
	err = pool.QueryRow(ctx, sqlAttachmentOf, id, cid, user).Scan(&obj, &size, &thumbSize, &covered)
	if errors.Is(err, pgx.ErrNoRows) {
		return apierr.NotFound("no attachment %s in conversation %d", id, cid)
	}
	if err != nil {
		return fmt.Errorf("attachment %s of %d: %w", id, cid, err)
	}
	if !covered {
		return apierr.NotMember("user %d was not a member of conversation %d when the message of attachment %s was sent", user, cid, id)
	}
	if thumbnail {
		if thumbSize == nil {
			return apierr.NotFound("attachment %s has no thumbnail (yet)", id)
		}
		obj, size = thumbnailObject(obj), *thumbSize
	}
	url, err := ac.Store.PresignGet(ctx, obj, ac.DownloadURLExpiry)
	if err != nil {
		return apierr.Unavailable("the object store could not sign the download", time.Second, err)
	}
	w.Header().Set("Cache-Control", "private, no-store")
	if !redirect {
		apierr.WriteJSON(w, http.StatusOK, protocol.AttachmentURL{URL: url, Size: size, SealedSize: sealed.Size(size),
			ExpiresAt: time.Now().Add(ac.DownloadURLExpiry).UTC().Truncate(time.Second)})
		return nil
	}
	http.Redirect(w, r, url, http.StatusFound)
	return nil
}

// localStoreRoute serves a LocalStore's signed URLs, when it is the store.
func (g *Gateway) localStoreRoute() []route {
	ls, ok := g.cfg.Attachments.Store.(*attachments.LocalStore)
	if !ok {
		return nil
	}
	h := ls.Handler()
	serve := func(w http.ResponseWriter, r *http.Request) error {
		h.ServeHTTP(w, r)
		return nil
	}
	p := attachments.LocalPath + "{key}"
	return []route{{"GET", p, false, bucketNone, serve}, {"PUT", p, false, bucketNone, serve}}
}

// objectsOf is the store as the send path sees it: nil when there is none
// (a nil Store in a non-nil interface would not compare nil there).
func objectsOf(st attachments.Store) write.Objects {
	if st == nil {
		return nil
	}
	return st
}

// queryBool reads an optional true/false query parameter.
func queryBool(q url.Values, name string, def bool) (bool, error) {
	v, ok := q[name]
	switch {
	case !ok:
		return def, nil
	case len(v) > 1:
		return false, apierr.BadRequest("%s is repeated", name)
	case v[0] == "true":
		return true, nil
	case v[0] == "false":
		return false, nil
	}
	return false, apierr.BadRequest("%s must be true or false", name)
}
