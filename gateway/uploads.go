package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
	"github.com/inboxd/inboxd/protocol/sealed"
)

// An upload after its creation (docs/protocol.md, "Attachments"): its
// uploader reads it again (GET .../uploads/{id}: fresh URLs, and for a
// multipart upload the parts the store still lacks, which is how a
// client resumes after a restart with nothing but the upload's id), and
// completes a multipart upload (POST .../uploads/{id}/complete) once the
// store holds every part. Both ask the store, not the gateway's memory,
// what has arrived.

// uploadRow is an upload as the uploads table keeps it.
type uploadRow struct {
	id                string
	cid, user         int64
	name, contentType string
	size              int64
	sha256            string
	width, height     int
	key               []byte
	object, multipart string
	state             string
	claimed           bool
	expiresAt         time.Time
}

const sqlUploadOf = `SELECT user_id, name, content_type, size, COALESCE(sha256, ''), COALESCE(width, 0), COALESCE(height, 0),
	key, object_key, COALESCE(multipart_id, ''), state, msg_id IS NOT NULL, expires_at,
	EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $2 AND user_id = $3 AND left_seq IS NULL)
FROM uploads WHERE id = $1::uuid AND conversation_id = $2`

// uploadOf reads upload id of conversation cid for its uploader user:
// another user's upload is as unknown as one that does not exist, and
// so is one being removed; an uploader no longer a member gets 403.
func (g *Gateway) uploadOf(r *http.Request) (*uploadRow, error) {
	cid, err := g.attachmentsOf(r)
	if err != nil {
		return nil, err
	}
	raw := r.PathValue("id")
	id, err := uuid.Parse(raw)
	if err != nil || len(raw) != 36 {
		return nil, apierr.BadRequest("id must be an upload id (a uuid)")
	}
	u := &uploadRow{id: id.String(), cid: cid}
	user := userFrom(r.Context())
	var member bool
	err = g.srv.Conv(cid).QueryRow(r.Context(), sqlUploadOf, u.id, cid, user).Scan(&u.user, &u.name, &u.contentType, &u.size,
		&u.sha256, &u.width, &u.height, &u.key, &u.object, &u.multipart, &u.state, &u.claimed, &u.expiresAt, &member)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && (u.user != user || u.state == "erased" || u.state == "removing") {
		return nil, apierr.NotFound("no upload %s of yours in conversation %d", u.id, cid)
	}
	if err != nil {
		return nil, fmt.Errorf("upload %s of %d: %w", u.id, cid, err)
	}
	if !member {
		// As for a new upload: a user who left cannot attach it any more.
		return nil, apierr.NotMember("user %d is not a member of conversation %d", user, cid)
	}
	if u.state == "open" && !u.claimed && !u.expiresAt.After(time.Now()) {
		return nil, apierr.NotFound("upload %s has expired", u.id)
	}
	return u, nil
}

// handleGetUpload is GET /v1/conversations/{cid}/uploads/{id}.
func (g *Gateway) handleGetUpload(w http.ResponseWriter, r *http.Request) error {
	u, err := g.uploadOf(r)
	if err != nil {
		return err
	}
	up, err := g.describeUpload(r.Context(), u, false)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "private, no-store")
	apierr.WriteJSON(w, http.StatusOK, up)
	return nil
}

// handleCompleteUpload is POST /v1/conversations/{cid}/uploads/{id}/complete:
// the store joins the parts of a multipart upload into the file. Done
// again, or on an upload already whole, it answers the upload as it is.
func (g *Gateway) handleCompleteUpload(w http.ResponseWriter, r *http.Request) error {
	u, err := g.uploadOf(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	if u.state == "open" && !u.claimed && u.multipart != "" {
		if err := g.completeParts(ctx, u); err != nil {
			return err
		}
	}
	up, err := g.describeUpload(ctx, u, false)
	if err != nil {
		return err
	}
	if up.State == protocol.UploadOpen {
		if up.Method == protocol.UploadMultipart {
			return apierr.BadRequest("upload %s lacks %d parts; PUT them first", u.id, up.PartsLeft)
		}
		return apierr.BadRequest("upload %s has not been uploaded yet: PUT the sealed file on its URL", u.id)
	}
	g.metrics.uploads.WithLabelValues("completed").Inc()
	apierr.WriteJSON(w, http.StatusOK, up)
	return nil
}

// completeParts has the store join u's parts, when it holds every one of
// the right size; otherwise it leaves them, and the answer lists what is
// missing.
func (g *Gateway) completeParts(ctx context.Context, u *uploadRow) error {
	st := g.cfg.Attachments.Store
	have, err := st.Parts(ctx, u.object, u.multipart)
	if errors.Is(err, attachments.ErrNotFound) {
		return nil // completed already (or gone): describeUpload says which
	}
	if err != nil {
		return apierr.Unavailable("the object store could not list the upload's parts", time.Second, err)
	}
	parts, missing := g.matchParts(u, have)
	if len(missing) > 0 {
		return nil
	}
	if err := st.CompleteMultipart(ctx, u.object, u.multipart, parts); err != nil && !errors.Is(err, attachments.ErrNotFound) {
		return apierr.Unavailable("the object store could not join the upload's parts", time.Second, err)
	}
	return nil
}

// matchParts sorts the parts the store holds of u into those of the
// right number and size, in order, and the numbers still missing.
func (g *Gateway) matchParts(u *uploadRow, have []attachments.Part) ([]attachments.Part, []int) {
	ps := g.cfg.Attachments.PartSize
	n := sealed.Parts(u.size, ps)
	byNumber := make(map[int]attachments.Part, len(have))
	for _, p := range have {
		byNumber[p.Number] = p
	}
	var parts []attachments.Part
	var missing []int
	for i := 1; i <= n; i++ {
		rg, _ := sealed.PartOf(u.size, ps, i)
		if p, ok := byNumber[i]; ok && p.Size == rg.Length {
			parts = append(parts, p)
		} else {
			missing = append(missing, i)
		}
	}
	return parts, missing
}

// describeUpload is the answer about u: its state, and while the store
// lacks its file, the key and where to PUT what is missing (fresh URLs).
// created says it was made just now (nothing to ask the store).
func (g *Gateway) describeUpload(ctx context.Context, u *uploadRow, created bool) (protocol.Upload, error) {
	ac := &g.cfg.Attachments
	up := protocol.Upload{ID: u.id, ConversationID: u.cid, Name: u.name, ContentType: u.contentType, Size: u.size,
		SHA256: u.sha256, Width: u.width, Height: u.height, SealedSize: sealed.Size(u.size), ChunkSize: sealed.ChunkSize,
		Method: http.MethodPut, Headers: map[string]string{}, ExpiresAt: u.expiresAt.UTC(), State: protocol.UploadOpen}
	if u.multipart != "" {
		up.Method, up.PartSize = protocol.UploadMultipart, ac.PartSize
	}
	if u.state != "open" || u.claimed || u.key == nil {
		up.State = protocol.UploadAttached
		return up, nil
	}
	up.Key = base64.RawURLEncoding.EncodeToString(u.key)
	now := time.Now()
	up.URLExpiresAt = now.Add(ac.UploadURLExpiry).UTC().Truncate(time.Second)
	// What the store holds: nothing at creation; else the parts, or the
	// whole file once completed.
	var missing []int
	switch {
	case u.multipart != "" && created:
		for i := 1; i <= sealed.Parts(u.size, ac.PartSize); i++ {
			missing = append(missing, i)
		}
	case u.multipart != "":
		have, err := ac.Store.Parts(ctx, u.object, u.multipart)
		if err != nil && !errors.Is(err, attachments.ErrNotFound) {
			return up, apierr.Unavailable("the object store could not list the upload's parts", time.Second, err)
		}
		if err == nil {
			_, missing = g.matchParts(u, have)
			break
		}
		fallthrough // completed: is the file there?
	case !created:
		size, err := ac.Store.Stat(ctx, u.object)
		if err != nil && !errors.Is(err, attachments.ErrNotFound) {
			return up, apierr.Unavailable("the object store could not be reached", time.Second, err)
		}
		if err == nil && size == up.SealedSize {
			up.State = protocol.UploadUploaded
			return up, nil
		}
		if u.multipart != "" {
			// Neither parts nor a whole file: the store dropped the
			// multipart upload (its lifecycle rule, or an operator).
			return up, apierr.NotFound("the store holds nothing of upload %s any more; upload the file again", u.id)
		}
	}
	if u.multipart == "" {
		url, header, err := ac.Store.PresignPut(ctx, u.object, ac.UploadURLExpiry)
		if err != nil {
			return up, apierr.Unavailable("the object store could not sign the upload", time.Second, err)
		}
		up.URL = url
		for k := range header {
			up.Headers[k] = header.Get(k)
		}
		return up, nil
	}
	up.PartsLeft = len(missing)
	up.Parts = []protocol.UploadPart{}
	for _, n := range missing[:min(len(missing), protocol.MaxUploadParts)] {
		rg, _ := sealed.PartOf(u.size, ac.PartSize, n)
		url, header, err := ac.Store.PresignPart(ctx, u.object, u.multipart, n, ac.UploadURLExpiry)
		if err != nil {
			return up, apierr.Unavailable("the object store could not sign the upload", time.Second, err)
		}
		p := protocol.UploadPart{Number: n, Size: rg.Length, URL: url, Headers: map[string]string{}}
		for k := range header {
			p.Headers[k] = header.Get(k)
		}
		up.Parts = append(up.Parts, p)
	}
	return up, nil
}

// nullIfEmpty is nil for "", for a NULL column.
func nullIfEmpty(s string) any {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	return s
}
