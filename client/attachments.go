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
	Body              io.Reader
	SHA256            string
	Width, Height     int
	// Progress, when set, is told how many sealed bytes have gone out, as
	// they go.
	Progress func(sent, total int64)
}

// Upload uploads f to conversationID (docs/protocol.md, "Attachments"):
// it asks the server for an upload, seals the file with the key it got
// (protocol/sealed) while streaming it straight to the object store,
// and returns the upload, whose ID a send then attaches (SendOptions
// .Attachments). The file never passes through the gateway, nor whole
// through memory. An upload not attached within the server's upload
// expiry (a day by default) is removed.
func (c *Client) Upload(ctx context.Context, conversationID int64, f UploadFile) (Upload, error) {
	if f.Body == nil || f.Size <= 0 {
		return Upload{}, errors.New("client: an upload needs a body and a positive size")
	}
	var up Upload
	_, _, err := c.api.do(ctx, http.MethodPost, "/v1/conversations/"+strconv.FormatInt(conversationID, 10)+"/uploads", nil,
		protocol.UploadRequest{Name: f.Name, ContentType: f.ContentType, Size: f.Size, SHA256: f.SHA256,
			Width: f.Width, Height: f.Height}, nil, &up, 0)
	if err != nil {
		return Upload{}, err
	}
	key, err := base64.RawURLEncoding.DecodeString(up.Key)
	if err != nil {
		return Upload{}, fmt.Errorf("client: upload %s: key: %w", up.ID, err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(sealed.Seal(pw, f.Body, f.Size, key)) }()
	var body io.Reader = pr
	if f.Progress != nil {
		body = &progressReader{r: pr, total: up.SealedSize, report: f.Progress}
	}
	req, err := http.NewRequestWithContext(ctx, up.Method, up.URL, body)
	if err != nil {
		pr.CloseWithError(err)
		return Upload{}, err
	}
	req.ContentLength = up.SealedSize
	for k, v := range up.Headers {
		req.Header.Set(k, v)
	}
	res, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		pr.CloseWithError(err)
		return Upload{}, fmt.Errorf("client: upload %s: %w", up.ID, err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode/100 != 2 {
		return Upload{}, fmt.Errorf("client: upload %s: the store answered %s", up.ID, res.Status)
	}
	return up, nil
}

// progressReader reports the bytes read through it.
type progressReader struct {
	r      io.Reader
	sent   int64
	total  int64
	report func(sent, total int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.sent += int64(n)
		p.report(p.sent, p.total)
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
