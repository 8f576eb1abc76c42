package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/internal/s3test"
	"github.com/inboxd/inboxd/protocol"
	"github.com/inboxd/inboxd/protocol/sealed"
)

// attachGateway starts a gateway whose attachments live in the store
// that mk makes, given the gateway's URL (a LocalStore signs URLs on it).
func attachGateway(t *testing.T, mk func(t *testing.T, base string) attachments.Store, tweak func(*AttachmentsConfig)) *tgw {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()
	store := mk(t, base)
	tg := buildGateway(t, func(c *Config) {
		c.Attachments.Store = store
		if tweak != nil {
			tweak(&c.Attachments)
		}
	})
	startListen(t, tg.g)
	tg.srv = httptest.NewUnstartedServer(tg.g.Handler())
	tg.srv.Listener.Close()
	tg.srv.Listener = ln
	tg.srv.Start()
	tg.url = tg.srv.URL
	t.Cleanup(func() {
		tg.g.Drain()
		tg.hc.CloseIdleConnections()
		tg.srv.Close()
	})
	return tg
}

// attachStores are the stores the attachment tests run on: a directory
// the gateway signs, and a real S3-compatible server (SeaweedFS).
func attachStores(t *testing.T) map[string]func(t *testing.T, base string) attachments.Store {
	out := map[string]func(t *testing.T, base string) attachments.Store{
		"local": func(t *testing.T, base string) attachments.Store {
			st, err := attachments.NewLocal(t.TempDir(), base, []byte("local-store-secret-0123456789"))
			require.NoError(t, err)
			return st
		},
	}
	if testing.Short() && os.Getenv(s3test.EnvEndpoint) == "" {
		return out
	}
	out["s3"] = func(t *testing.T, _ string) attachments.Store {
		st, _ := s3test.Store(t)
		return st
	}
	return out
}

// upload asks for an upload of plain and PUTs it sealed; it returns the
// answer.
func (u *user) upload(t *testing.T, cid int64, name, ct string, plain []byte) protocol.Upload {
	t.Helper()
	sum := sha256.Sum256(plain)
	r := u.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/uploads", cid), map[string]any{
		"name": name, "content_type": ct, "size": len(plain), "sha256": hex.EncodeToString(sum[:])})
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	var up protocol.Upload
	r.decode(t, &up)
	require.EqualValues(t, sealed.Size(int64(len(plain))), up.SealedSize)
	key, err := base64.RawURLEncoding.DecodeString(up.Key)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, sealed.Seal(&buf, bytes.NewReader(plain), int64(len(plain)), key))
	req, err := http.NewRequest(up.Method, up.URL, &buf)
	require.NoError(t, err)
	for k, v := range up.Headers {
		req.Header.Set(k, v)
	}
	res, err := u.tg.hc.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Less(t, res.StatusCode, 300, "PUT of the sealed file")
	return up
}

// decodeMsg is the message of an answer.
func decodeMsg(t *testing.T, r resp) *protocol.Message {
	t.Helper()
	var m protocol.Message
	r.decode(t, &m)
	return &m
}

// sendFiles sends body with the uploads ids attached.
func (u *user) sendFiles(t *testing.T, cid int64, body string, ids ...string) resp {
	t.Helper()
	return u.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid),
		map[string]any{"msg_id": uuid.NewString(), "body": body, "attachments": ids})
}

// download fetches an attachment as a client does: the URL
// (?redirect=false), the sealed bytes (a byte range when rng is set), and
// opens them with the key the message carries.
func (u *user) download(t *testing.T, cid int64, a protocol.Attachment) []byte {
	t.Helper()
	r := u.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/attachments/%s?redirect=false", cid, a.ID), nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var at protocol.AttachmentURL
	r.decode(t, &at)
	res, err := u.tg.hc.Get(at.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	key, err := base64.RawURLEncoding.DecodeString(a.Key)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, sealed.Open(&out, res.Body, a.Size, key))
	return out.Bytes()
}

func TestAttachments(t *testing.T) {
	for name, mk := range attachStores(t) {
		t.Run(name, func(t *testing.T) {
			tg := attachGateway(t, mk, func(c *AttachmentsConfig) {
				c.MaxSize, c.QuotaFiles, c.Types = 1<<20, 6, []string{"image/*", "application/pdf", "text/plain"}
			})
			ctx := context.Background()
			// The conversation's server holds its uploads and messages.
			db := func(cid int64) *pgxpool.Pool { return tg.g.srv.Conv(cid) }
			alice, bob, carol, eve := tg.user(t, 1), tg.user(t, 2), tg.user(t, 3), tg.user(t, 9)
			cid := alice.create(t, "files", 2, 3)
			uploads := fmt.Sprintf("/v1/conversations/%d/uploads", cid)

			// Refusals of the upload itself.
			for _, c := range []struct {
				body   map[string]any
				status int
			}{
				{map[string]any{"name": "", "content_type": "image/png", "size": 10}, 400},
				{map[string]any{"name": "../x", "content_type": "image/png", "size": 10}, 400},
				{map[string]any{"name": "a.png", "content_type": "image/png", "size": 0}, 400},
				{map[string]any{"name": "a.png", "content_type": "image/png; q=1", "size": 10}, 400},
				{map[string]any{"name": "a.exe", "content_type": "application/x-msdownload", "size": 10}, 400},
				{map[string]any{"name": "a.png", "content_type": "image/png", "size": 2 << 20}, 413},
				{map[string]any{"name": "a.png", "content_type": "image/png", "size": 10, "sha256": "xyz"}, 400},
				{map[string]any{"name": "a.png", "content_type": "image/png", "size": 10, "extra": 1}, 400},
			} {
				r := alice.do(t, "POST", uploads, c.body)
				require.Equal(t, c.status, r.status, "%v: %s", c.body, r)
			}
			r := eve.do(t, "POST", uploads, map[string]any{"name": "a.png", "content_type": "image/png", "size": 10})
			require.Equal(t, http.StatusForbidden, r.status, "an outsider: %s", r)
			r = alice.do(t, "POST", "/v1/conversations/999999/uploads", map[string]any{"name": "a.png", "content_type": "image/png", "size": 10})
			require.Equal(t, http.StatusNotFound, r.status, "%s", r)

			// An image and a PDF, sent with no text.
			img := make([]byte, 150_000)
			_, _ = rand.Read(img)
			pdf := []byte("%PDF-1.4 a small file")
			up1 := alice.upload(t, cid, "cat.png", "image/png", img)
			up2 := alice.upload(t, cid, "doc.pdf", "application/pdf", pdf)
			r = alice.sendFiles(t, cid, "", up1.ID, up2.ID)
			require.Equal(t, http.StatusCreated, r.status, "%s", r)
			m := decodeMsg(t, r)
			require.Len(t, m.Attachments, 2)
			require.Equal(t, "cat.png", m.Attachments[0].Name)
			require.EqualValues(t, len(img), m.Attachments[0].Size)
			require.Equal(t, up1.Key, m.Attachments[0].Key)

			// Every member sees them, in history and sync, and downloads them.
			hist := bob.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/messages?limit=10", cid), nil)
			var page protocol.History
			hist.decode(t, &page)
			last := page.Messages[len(page.Messages)-1]
			require.Equal(t, m.Attachments, last.Attachments)
			require.True(t, bytes.Equal(img, bob.download(t, cid, last.Attachments[0])))
			require.Equal(t, pdf, carol.download(t, cid, last.Attachments[1]))
			sy := bob.sync(t, "after=0&limit=100")
			found := false
			for _, e := range sy.Entries {
				if e.Message != nil && e.Message.MsgID == m.MsgID {
					found = true
					require.Equal(t, m.Attachments, e.Message.Attachments)
				}
			}
			require.True(t, found, "the message is in bob's inbox")

			// The default answer redirects to the presigned GET.
			noFollow := &http.Client{Transport: tg.hc.Transport,
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/conversations/%d/attachments/%s", tg.url, cid, up1.ID), nil)
			req.Header.Set("Authorization", "Bearer "+carol.token)
			res, err := noFollow.Do(req)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusFound, res.StatusCode)
			loc := res.Header.Get("Location")
			require.NotEmpty(t, loc)
			// A byte range of the sealed file opens from its chunks alone.
			rg, err := sealed.RangeOf(int64(len(img)), 70_000, 1000)
			require.NoError(t, err)
			rq, _ := http.NewRequest("GET", loc, nil)
			rq.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", rg.Offset, rg.Offset+rg.Length-1))
			res, err = tg.hc.Do(rq)
			require.NoError(t, err)
			require.Equal(t, http.StatusPartialContent, res.StatusCode)
			key, _ := base64.RawURLEncoding.DecodeString(up1.Key)
			var part bytes.Buffer
			require.NoError(t, sealed.OpenChunks(&part, res.Body, int64(len(img)), rg.First, rg.Count, key))
			res.Body.Close()
			require.Equal(t, img[70_000:71_000], part.Bytes()[rg.Skip:rg.Skip+1000])
			// A changed URL is refused.
			forged := strings.Replace(loc, up1.ID, up2.ID, 1)
			res, err = tg.hc.Get(forged)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusForbidden, res.StatusCode, "a forged URL")

			// Outsiders and the wrong ids.
			dl := func(u *user, id string) int {
				return u.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/attachments/%s?redirect=false", cid, id), nil).status
			}
			require.Equal(t, http.StatusForbidden, dl(eve, up1.ID), "an outsider")
			require.Equal(t, http.StatusNotFound, dl(bob, uuid.NewString()), "no such attachment")
			require.Equal(t, http.StatusBadRequest, dl(bob, "nope"))

			// A member removed before a message cannot fetch its files;
			// what was sent while it was a member it still can, as history
			// shows it.
			r = alice.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/3", cid), nil)
			require.Equal(t, http.StatusAccepted, r.status, "%s", r)
			up3 := alice.upload(t, cid, "later.txt", "text/plain", []byte("after carol left"))
			r = alice.sendFiles(t, cid, "for bob", up3.ID)
			require.Equal(t, http.StatusCreated, r.status, "%s", r)
			later := decodeMsg(t, r)
			require.Equal(t, http.StatusForbidden, dl(carol, up3.ID), "removed before the message")
			require.Equal(t, http.StatusOK, dl(carol, up1.ID), "removed after the message")
			require.Equal(t, []byte("after carol left"), bob.download(t, cid, later.Attachments[0]))

			// What a send may not attach: another's upload, one already
			// attached, one not uploaded, one of the wrong size.
			upB := bob.upload(t, cid, "b.txt", "text/plain", []byte("bob's"))
			require.Equal(t, http.StatusBadRequest, alice.sendFiles(t, cid, "x", upB.ID).status, "another user's upload")
			require.Equal(t, http.StatusBadRequest, alice.sendFiles(t, cid, "x", up1.ID).status, "already attached")
			r = alice.do(t, "POST", uploads, map[string]any{"name": "n.txt", "content_type": "text/plain", "size": 10})
			var notPut protocol.Upload
			r.decode(t, &notPut)
			require.Equal(t, http.StatusBadRequest, alice.sendFiles(t, cid, "x", notPut.ID).status, "not uploaded")
			r = alice.do(t, "POST", uploads, map[string]any{"name": "s.txt", "content_type": "text/plain", "size": 10})
			var short protocol.Upload
			r.decode(t, &short)
			put, _ := http.NewRequest("PUT", short.URL, bytes.NewReader([]byte("abc")))
			res, err = tg.hc.Do(put)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusBadRequest, alice.sendFiles(t, cid, "x", short.ID).status, "the wrong size")
			require.Equal(t, http.StatusBadRequest, alice.sendFiles(t, cid, "", "not-a-uuid").status)
			// The quota: six open uploads at most (notPut, short, upB's are bob's).
			for range 4 {
				r = alice.do(t, "POST", uploads, map[string]any{"name": "q.txt", "content_type": "text/plain", "size": 1})
				require.Equal(t, http.StatusCreated, r.status, "%s", r)
			}
			r = alice.do(t, "POST", uploads, map[string]any{"name": "q.txt", "content_type": "text/plain", "size": 1})
			require.Equal(t, http.StatusForbidden, r.status, "over the quota: %s", r)

			// A delete erases: the message shows no files, the download is
			// gone, and no key is left anywhere the server keeps.
			r = alice.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/messages/%d", cid, m.Seq), nil, "Idempotency-Key", uuid.NewString())
			require.Less(t, r.status, 300, "%s", r)
			require.Equal(t, http.StatusNotFound, dl(bob, up1.ID))
			hist = bob.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/messages?after=%d&limit=1", cid, m.Seq-1), nil)
			hist.decode(t, &page)
			require.True(t, page.Messages[0].Deleted)
			require.Empty(t, page.Messages[0].Attachments)
			var states []string
			rows, err := db(cid).Query(ctx, `SELECT state || ':' || (key IS NULL)::text FROM uploads WHERE id = ANY($1::uuid[]) ORDER BY id`,
				[]string{up1.ID, up2.ID})
			require.NoError(t, err)
			for rows.Next() {
				var s string
				require.NoError(t, rows.Scan(&s))
				states = append(states, s)
			}
			require.NoError(t, rows.Err())
			require.Equal(t, []string{"erased:true", "erased:true"}, states)
			var keys int
			require.NoError(t, db(cid).QueryRow(ctx, `SELECT count(*) FROM messages WHERE attachments::text LIKE '%'||$1||'%'`, up1.Key).Scan(&keys))
			require.Zero(t, keys)

			// The sweeper removes the deleted message's files and an upload
			// past its expiry; the store then holds exactly the files of live
			// messages and of the uploads still waiting.
			_, err = db(cid).Exec(ctx, `UPDATE uploads SET expires_at = now() - interval '1 second' WHERE id = $1`, short.ID)
			require.NoError(t, err)
			n, err := tg.g.SweepUploads(ctx)
			require.NoError(t, err)
			require.Equal(t, 3, n, "two erased, one expired")
			store := tg.g.cfg.Attachments.Store
			stored, err := store.Keys(ctx, "inboxd-")
			require.NoError(t, err)
			var live []string
			rows, err = db(cid).Query(ctx, `SELECT object_key FROM uploads WHERE state IN ('open', 'attached')`)
			require.NoError(t, err)
			for rows.Next() {
				var k string
				require.NoError(t, rows.Scan(&k))
				if _, err := store.Stat(ctx, k); err == nil {
					live = append(live, k)
				}
			}
			require.NoError(t, rows.Err())
			require.ElementsMatch(t, live, stored)
			require.Len(t, stored, 2, "up3 attached, upB waiting")
			var left int
			require.NoError(t, db(cid).QueryRow(ctx, `SELECT count(*) FROM uploads WHERE id = ANY($1::uuid[])`,
				[]string{up1.ID, up2.ID, short.ID}).Scan(&left))
			require.Zero(t, left, "their rows are gone")
			tg.verify(t)
		})
	}
}
