package client

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/inboxd/inboxd/protocol"
	"github.com/inboxd/inboxd/protocol/sealed"
)

// Attachment is a file a message attaches (protocol.Attachment): its
// description and the key that opens it.
type Attachment = protocol.Attachment

// Upload is an upload the server made room for (protocol.Upload).
type Upload = protocol.Upload

// UploadFile is a file to upload: its name, media type and size, and
// where to read its bytes (exactly Size of them). SHA256 (hex), Width and
// Height are optional and travel to every member.
type UploadFile struct {
	Name, ContentType string
	Size              int64
	// Body is read once from its start; a Body that is also an io.ReaderAt
	// (an *os.File, a *bytes.Reader) lets a large file go in parts that
	// resume (MultipartThreshold), and lets ResumeUpload read it again.
	Body          io.Reader
	SHA256        string
	Width, Height int
	// Progress, when set, is told how many sealed bytes have gone out, as
	// they go.
	Progress func(sent, total int64)
	// Created, when set, is told the upload as soon as the server made
	// it, before any byte goes: keep its ID to resume the upload after a
	// restart (ResumeUpload).
	Created func(Upload)
}

// MultipartThreshold is the size from which Upload sends a file whose
// Body is an io.ReaderAt in parts: each part is sealed and PUT on its
// own, and a failed or interrupted upload resumes from the parts the
// store lacks instead of from the start.
const MultipartThreshold = 8 << 20

// Upload uploads f to conversationID (docs/protocol.md, "Attachments"):
// it asks the server for an upload, seals the file with the key it got
// (protocol/sealed) while streaming it straight to the object store,
// and returns the upload, whose ID a send then attaches (SendOptions
// .Attachments). The file never passes through the gateway, nor whole
// through memory. A large file goes in parts (MultipartThreshold); if
// the upload fails part way, ResumeUpload with its ID (from f.Created or
// the error, an *UploadError) sends only what is missing. An upload not
// attached within the server's upload expiry (a day by default) is
// removed.
func (c *Client) Upload(ctx context.Context, conversationID int64, f UploadFile) (Upload, error) {
	if f.Body == nil || f.Size <= 0 {
		return Upload{}, errors.New("client: an upload needs a body and a positive size")
	}
	_, ra := f.Body.(io.ReaderAt)
	var up Upload
	_, _, err := c.api.do(ctx, http.MethodPost, uploadsPath(conversationID), nil,
		protocol.UploadRequest{Name: f.Name, ContentType: f.ContentType, Size: f.Size, SHA256: f.SHA256,
			Width: f.Width, Height: f.Height, Multipart: ra && f.Size >= MultipartThreshold}, nil, &up, 0)
	if err != nil {
		return Upload{}, err
	}
	if f.Created != nil {
		f.Created(up)
	}
	up, err = c.finishUpload(ctx, conversationID, up, f, false)
	if err != nil {
		return Upload{}, &UploadError{ID: up.ID, Err: err}
	}
	return up, nil
}

// ResumeUpload takes up upload id of conversationID, made by Upload (here
// or in an earlier run of the app) for the same file f: it asks the
// server what the store still lacks and sends only that (a whole-file
// upload is sent again from its start), then completes it. f.Body must be
// an io.ReaderAt unless the store lacks nothing. An upload already whole
// or attached is returned as it is; one expired or removed is an
// *APIError with status 404 (upload the file again).
func (c *Client) ResumeUpload(ctx context.Context, conversationID int64, id string, f UploadFile) (Upload, error) {
	var up Upload
	if _, _, err := c.api.do(ctx, http.MethodGet, uploadsPath(conversationID)+"/"+url.PathEscape(id), nil, nil, nil, &up, 0); err != nil {
		return Upload{}, err
	}
	if f.Size != 0 && f.Size != up.Size {
		return Upload{}, fmt.Errorf("client: upload %s is of %d bytes, not %d", id, up.Size, f.Size)
	}
	f.Size = up.Size
	up, err := c.finishUpload(ctx, conversationID, up, f, true)
	if err != nil {
		return Upload{}, &UploadError{ID: id, Err: err}
	}
	return up, nil
}

// UploadError is an upload that failed after the server made it: ID
// resumes it (ResumeUpload).
type UploadError struct {
	ID  string
	Err error
}

func (e *UploadError) Error() string { return fmt.Sprintf("client: upload %s: %v", e.ID, e.Err) }
func (e *UploadError) Unwrap() error { return e.Err }

func uploadsPath(cid int64) string {
	return "/v1/conversations/" + strconv.FormatInt(cid, 10) + "/uploads"
}

// finishUpload sends what the store lacks of up, as the server described
// it, and completes a multipart upload; again says the body may have been
// read before (only an io.ReaderAt is read then).
func (c *Client) finishUpload(ctx context.Context, cid int64, up Upload, f UploadFile, again bool) (Upload, error) {
	if up.State == protocol.UploadUploaded || up.State == protocol.UploadAttached {
		return up, nil
	}
	key, err := base64.RawURLEncoding.DecodeString(up.Key)
	if err != nil {
		return up, fmt.Errorf("key: %w", err)
	}
	ra, isRA := f.Body.(io.ReaderAt)
	if up.Method != protocol.UploadMultipart {
		body := f.Body
		if again || isRA {
			if !isRA {
				return up, errors.New("resuming needs a body that is an io.ReaderAt")
			}
			body = io.NewSectionReader(ra, 0, f.Size)
		}
		var sent int64
		if err := c.putSealed(ctx, up.URL, up.Headers, up.SealedSize, func(w io.Writer) error {
			return sealed.Seal(w, body, f.Size, key)
		}, f.Progress, &sent, up.SealedSize); err != nil {
			return up, err
		}
		return up, nil
	}
	if !isRA {
		return up, errors.New("an upload in parts needs a body that is an io.ReaderAt")
	}
	// What is in already: the sealed size less the parts listed, when
	// they are all that is missing (an estimate for progress only).
	var sent, listed int64
	for _, p := range up.Parts {
		listed += p.Size
	}
	if up.PartsLeft == len(up.Parts) {
		sent = up.SealedSize - listed
	}
	for len(up.Parts) > 0 {
		for _, p := range up.Parts {
			rg, err := sealed.PartOf(f.Size, up.PartSize, p.Number)
			if err != nil {
				return up, err
			}
			if rg.Length != p.Size {
				return up, fmt.Errorf("part %d: the server says %d bytes, the file makes %d", p.Number, p.Size, rg.Length)
			}
			plain := io.NewSectionReader(ra, rg.First*sealed.ChunkSize, f.Size-rg.First*sealed.ChunkSize)
			if err := c.putSealed(ctx, p.URL, p.Headers, p.Size, func(w io.Writer) error {
				return sealed.SealChunks(w, plain, f.Size, rg.First, rg.Count, key)
			}, f.Progress, &sent, up.SealedSize); err != nil {
				return up, fmt.Errorf("part %d: %w", p.Number, err)
			}
		}
		if up.PartsLeft <= len(up.Parts) {
			break
		}
		// More parts than one answer lists: the next ones.
		var next Upload
		if _, _, err := c.api.do(ctx, http.MethodGet, uploadsPath(cid)+"/"+url.PathEscape(up.ID), nil, nil, nil, &next, 0); err != nil {
			return up, err
		}
		up = next
	}
	var done Upload
	if _, _, err := c.api.do(ctx, http.MethodPost, uploadsPath(cid)+"/"+url.PathEscape(up.ID)+"/complete", nil, nil, nil, &done, 0); err != nil {
		return up, err
	}
	return done, nil
}

// putSealed PUTs size sealed bytes that seal writes to u with header,
// reporting progress (sent is the running count, of total).
func (c *Client) putSealed(ctx context.Context, u string, header map[string]string, size int64, seal func(io.Writer) error,
	progress func(sent, total int64), sent *int64, total int64) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(seal(pw)) }()
	var body io.Reader = pr
	if progress != nil {
		body = &progressReader{r: pr, sent: sent, total: total, report: progress}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, body)
	if err != nil {
		pr.CloseWithError(err)
		return err
	}
	req.ContentLength = size
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		pr.CloseWithError(err)
		return err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	pr.CloseWithError(io.ErrClosedPipe) // the sealing goroutine ends if the store stopped reading
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("the store answered %s", res.Status)
	}
	return nil
}

// progressReader reports the bytes read through it.
type progressReader struct {
	r      io.Reader
	sent   *int64
	total  int64
	report func(sent, total int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		*p.sent += int64(n)
		p.report(*p.sent, p.total)
	}
	return n, err
}

// Download writes the file a of a message of conversationID to w: it
// asks the server for the object's URL (the reader's membership must
// cover the message), fetches the sealed bytes from the store and opens
// them with a's key, refusing bytes that were changed (sealed.ErrOpen).
func (c *Client) Download(ctx context.Context, conversationID int64, a Attachment, w io.Writer) error {
	key, err := base64.RawURLEncoding.DecodeString(a.Key)
	if err != nil {
		return fmt.Errorf("client: attachment %s: key: %w", a.ID, err)
	}
	return c.download(ctx, conversationID, a.ID, url.Values{"redirect": {"false"}}, a.Size, key, w)
}

// DownloadThumbnail writes the thumbnail of image a (a JPEG; see
// a.Thumbnail, nil until the server made it) to w, opened with the key
// derived from a's.
func (c *Client) DownloadThumbnail(ctx context.Context, conversationID int64, a Attachment, w io.Writer) error {
	if a.Thumbnail == nil {
		return fmt.Errorf("client: attachment %s has no thumbnail (yet)", a.ID)
	}
	key, err := base64.RawURLEncoding.DecodeString(a.Key)
	if err != nil {
		return fmt.Errorf("client: attachment %s: key: %w", a.ID, err)
	}
	return c.download(ctx, conversationID, a.ID, url.Values{"redirect": {"false"}, "thumbnail": {"true"}},
		a.Thumbnail.Size, sealed.ThumbnailKey(key), w)
}

// download fetches the sealed object the query names of attachment id
// (size bytes once opened) and opens it with key into w.
func (c *Client) download(ctx context.Context, conversationID int64, id string, q url.Values, size int64, key []byte, w io.Writer) error {
	var at protocol.AttachmentURL
	_, _, err := c.api.do(ctx, http.MethodGet, "/v1/conversations/"+strconv.FormatInt(conversationID, 10)+"/attachments/"+url.PathEscape(id),
		q, nil, nil, &at, 0)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, at.URL, nil)
	if err != nil {
		return err
	}
	res, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("client: attachment %s: %w", id, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("client: attachment %s: the store answered %s", id, res.Status)
	}
	return sealed.Open(w, res.Body, size, key)
}
