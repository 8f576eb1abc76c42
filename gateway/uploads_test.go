package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/protocol"
	"github.com/inboxd/inboxd/protocol/sealed"
)

// putPart seals part p of plain with key and PUTs it on its URL.
func (u *user) putPart(t *testing.T, up protocol.Upload, p protocol.UploadPart, plain []byte) {
	t.Helper()
	key, err := base64.RawURLEncoding.DecodeString(up.Key)
	require.NoError(t, err)
	rg, err := sealed.PartOf(int64(len(plain)), up.PartSize, p.Number)
	require.NoError(t, err)
	require.Equal(t, rg.Length, p.Size, "part %d's size", p.Number)
	var buf bytes.Buffer
	require.NoError(t, sealed.SealChunks(&buf, bytes.NewReader(plain[rg.First*sealed.ChunkSize:]), int64(len(plain)),
		rg.First, rg.Count, key))
	require.EqualValues(t, p.Size, buf.Len())
	req, err := http.NewRequest(http.MethodPut, p.URL, &buf)
	require.NoError(t, err)
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	res, err := u.tg.hc.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Less(t, res.StatusCode, 300, "PUT of part %d", p.Number)
}

// TestMultipartUploads: a large file in parts, PUT in any order, read
// again (the resume after a restart), completed, attached and read back
// with ranges; refusals on the way; an abandoned one's parts swept.
func TestMultipartUploads(t *testing.T) {
	for name, mk := range attachStores(t) {
		t.Run(name, func(t *testing.T) {
			tg := attachGateway(t, mk, func(c *AttachmentsConfig) { c.MaxSize, c.PartSize = 20<<20, MinUploadPartSize })
			st := tg.g.cfg.Attachments.Store
			ctx := context.Background()
			alice, bob, eve := tg.user(t, 1), tg.user(t, 2), tg.user(t, 9)
			cid := alice.create(t, "large files", 2)
			plain := make([]byte, 2*MinUploadPartSize+100_000)
			_, _ = rand.Read(plain)

			r := alice.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/uploads", cid), map[string]any{
				"name": "film.mp4", "content_type": "video/mp4", "size": len(plain), "multipart": true})
			require.Equal(t, http.StatusCreated, r.status, "%s", r)
			var up protocol.Upload
			r.decode(t, &up)
			require.Equal(t, protocol.UploadMultipart, up.Method)
			require.Equal(t, protocol.UploadOpen, up.State)
			require.Empty(t, up.URL)
			require.EqualValues(t, MinUploadPartSize, up.PartSize)
			require.Equal(t, 3, up.PartsLeft)
			require.Len(t, up.Parts, 3)
			var sum int64
			for i, p := range up.Parts {
				require.Equal(t, i+1, p.Number)
				sum += p.Size
			}
			require.Equal(t, up.SealedSize, sum, "the parts make the sealed file")
			path := fmt.Sprintf("/v1/conversations/%d/uploads/%s", cid, up.ID)

			// Nothing is complete, and nobody else sees the upload.
			r = alice.do(t, "POST", path+"/complete", nil)
			require.Equal(t, http.StatusBadRequest, r.status, "%s", r)
			require.Contains(t, string(r.body), "lacks 3 parts")
			for _, other := range []*user{bob, eve} {
				r = other.do(t, "GET", path, nil)
				require.Equal(t, http.StatusNotFound, r.status, "another user's upload: %s", r)
				r = other.do(t, "POST", path+"/complete", nil)
				require.Equal(t, http.StatusNotFound, r.status, "%s", r)
			}
			r = alice.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/uploads/not-a-uuid", cid), nil)
			require.Equal(t, http.StatusBadRequest, r.status, "%s", r)

			// Part 2, then a client that knows only the id reads what is
			// left, with the key, and fresh URLs.
			alice.putPart(t, up, up.Parts[1], plain)
			r = alice.do(t, "GET", path, nil)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			var again protocol.Upload
			again = protocol.Upload{}
			r.decode(t, &again)
			require.Equal(t, up.Key, again.Key)
			require.Equal(t, 2, again.PartsLeft)
			require.Equal(t, []int{1, 3}, []int{again.Parts[0].Number, again.Parts[1].Number})
			r = alice.sendFiles(t, cid, "too early", up.ID)
			require.Equal(t, http.StatusBadRequest, r.status, "an upload not completed: %s", r)
			for _, p := range again.Parts {
				alice.putPart(t, again, p, plain)
			}
			r = alice.do(t, "GET", path, nil)
			again = protocol.Upload{}
			r.decode(t, &again)
			require.Zero(t, again.PartsLeft)
			require.Empty(t, again.Parts)
			require.Equal(t, protocol.UploadOpen, again.State, "all parts in, not joined yet")

			// Completed, twice (a retry), then attached.
			for range 2 {
				r = alice.do(t, "POST", path+"/complete", nil)
				require.Equal(t, http.StatusOK, r.status, "%s", r)
				again = protocol.Upload{}
				r.decode(t, &again)
				require.Equal(t, protocol.UploadUploaded, again.State)
			}
			r = alice.sendFiles(t, cid, "the film", up.ID)
			require.Equal(t, http.StatusCreated, r.status, "%s", r)
			m := decodeMsg(t, r)
			require.True(t, bytes.Equal(plain, bob.download(t, cid, m.Attachments[0])))

			// A range across parts 1 and 2, opened alone.
			rg, err := sealed.RangeOf(int64(len(plain)), MinUploadPartSize-10, 100)
			require.NoError(t, err)
			r = bob.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/attachments/%s?redirect=false", cid, up.ID), nil)
			var at protocol.AttachmentURL
			r.decode(t, &at)
			req, _ := http.NewRequest(http.MethodGet, at.URL, nil)
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", rg.Offset, rg.Offset+rg.Length-1))
			res, err := tg.hc.Do(req)
			require.NoError(t, err)
			require.Equal(t, http.StatusPartialContent, res.StatusCode)
			var out bytes.Buffer
			key, _ := base64.RawURLEncoding.DecodeString(up.Key)
			require.NoError(t, sealed.OpenChunks(&out, res.Body, int64(len(plain)), rg.First, rg.Count, key))
			res.Body.Close()
			require.Equal(t, plain[MinUploadPartSize-10:MinUploadPartSize+90], out.Bytes()[rg.Skip:rg.Skip+100])

			// Attached: no key nor URLs any more.
			r = alice.do(t, "GET", path, nil)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			again = protocol.Upload{}
			r.decode(t, &again)
			require.Equal(t, protocol.UploadAttached, again.State)
			require.Empty(t, again.Key)
			require.Empty(t, again.Parts)

			// A whole-file upload reads the same way.
			small := []byte("a small note")
			r = alice.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/uploads", cid), map[string]any{
				"name": "note.txt", "content_type": "text/plain", "size": len(small)})
			var one protocol.Upload
			r.decode(t, &one)
			require.Equal(t, http.MethodPut, one.Method)
			r = alice.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/uploads/%s", cid, one.ID), nil)
			again = protocol.Upload{}
			r.decode(t, &again)
			require.Equal(t, protocol.UploadOpen, again.State)
			require.NotEmpty(t, again.URL)
			r = alice.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/uploads/%s/complete", cid, one.ID), nil)
			require.Equal(t, http.StatusBadRequest, r.status, "%s", r)
			alice.upload(t, cid, "note2.txt", "text/plain", small) // another, PUT whole
			r = alice.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/uploads", cid), map[string]any{
				"name": "x.bin", "content_type": "application/octet-stream", "size": 21 << 20, "multipart": true})
			require.Equal(t, http.StatusRequestEntityTooLarge, r.status, "%s", r)

			// An upload in parts abandoned half way: at its expiry, the
			// sweeper drops its parts with its row.
			r = alice.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/uploads", cid), map[string]any{
				"name": "left.bin", "content_type": "application/octet-stream", "size": len(plain), "multipart": true})
			var left protocol.Upload
			r.decode(t, &left)
			alice.putPart(t, left, left.Parts[0], plain)
			var obj, mp string
			pool := tg.g.srv.Conv(cid)
			require.NoError(t, pool.QueryRow(ctx, `SELECT object_key, multipart_id FROM uploads WHERE id = $1`, left.ID).Scan(&obj, &mp))
			parts, err := st.Parts(ctx, obj, mp)
			require.NoError(t, err)
			require.Len(t, parts, 1)
			_, err = pool.Exec(ctx, `UPDATE uploads SET expires_at = now() - interval '1 second' WHERE id = $1`, left.ID)
			require.NoError(t, err)
			r = alice.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/uploads/%s", cid, left.ID), nil)
			require.Equal(t, http.StatusNotFound, r.status, "an expired upload: %s", r)
			_, err = tg.g.SweepUploads(ctx)
			require.NoError(t, err)
			_, err = st.Parts(ctx, obj, mp)
			require.True(t, errors.Is(err, attachments.ErrNotFound), "the parts are dropped: %v", err)
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM uploads WHERE id = $1`, left.ID).Scan(&n))
			require.Zero(t, n)
		})
	}
}
