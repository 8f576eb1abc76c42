package gateway

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/protocol"
	"github.com/inboxd/inboxd/protocol/sealed"
)

// A randomized run through the public API, against a model: members
// upload (some never PUT their file), attach and send, download; the
// conversation's creator removes members and senders delete messages;
// outsiders, members removed before a message, forged URLs and others'
// uploads are refused. At the end, after a sweep with some uploads
// expired, the store holds exactly the files of live messages and of the
// uploads still waiting, and the sealed bytes of every deleted message's
// files, read straight from the store before the delete, open with no key
// left anywhere the server keeps one.
func TestAttachmentsRandomized(t *testing.T) {
	for name, mk := range attachStores(t) {
		t.Run(name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 37))
			tg := attachGateway(t, mk, func(c *AttachmentsConfig) { c.ThumbnailSize = -1 })
			ctx := context.Background()
			store := tg.g.cfg.Attachments.Store
			users := map[int64]*user{}
			for id := int64(1); id <= 6; id++ {
				users[id] = tg.user(t, id)
			}
			cid := users[1].create(t, "random", 2, 3, 4, 5) // 6 is an outsider
			db := tg.g.srv.Conv(cid)

			type upload struct {
				up       protocol.Upload
				owner    int64
				plain    []byte
				put      bool
				attached bool
				expired  bool
			}
			type message struct {
				m            protocol.Message
				deleted      bool
				sealedBefore map[string][]byte // the files' sealed bytes, read before the delete
			}
			left := map[int64]int64{} // member -> the seq of its removal
			var ups []*upload
			var msgs []*message
			members := func() []int64 {
				var out []int64
				for id := int64(1); id <= 5; id++ {
					if _, gone := left[id]; !gone {
						out = append(out, id)
					}
				}
				return out
			}
			pick := func(ids []int64) int64 { return ids[rng.IntN(len(ids))] }

			for step := 0; step < 120; step++ {
				switch op := rng.IntN(100); {
				case op < 30: // upload, PUT it (mostly)
					who := pick(members())
					plain := make([]byte, 1+rng.IntN(150_000))
					_, _ = crand.Read(plain)
					u := &upload{owner: who, plain: plain}
					if rng.IntN(10) == 0 {
						r := users[who].do(t, "POST", fmt.Sprintf("/v1/conversations/%d/uploads", cid),
							map[string]any{"name": "n.bin", "content_type": "application/octet-stream", "size": len(plain)})
						require.Equal(t, http.StatusCreated, r.status, "%s", r)
						r.decode(t, &u.up)
					} else {
						u.up, u.put = users[who].upload(t, cid, "f.bin", "application/octet-stream", plain), true
					}
					ups = append(ups, u)
				case op < 55: // send with one or two of one's own finished uploads
					who := pick(members())
					var ids []string
					var chosen []*upload
					for _, u := range ups {
						if u.owner == who && u.put && !u.attached && !u.expired && len(ids) < 2 {
							ids, chosen = append(ids, u.up.ID), append(chosen, u)
						}
					}
					if len(ids) == 0 {
						continue
					}
					r := users[who].sendFiles(t, cid, "", ids...)
					require.Equal(t, http.StatusCreated, r.status, "%s", r)
					m := decodeMsg(t, r)
					require.Len(t, m.Attachments, len(ids))
					for _, u := range chosen {
						u.attached = true
					}
					msgs = append(msgs, &message{m: *m})
				case op < 62: // attach someone else's upload, or an unfinished one: refused
					who := pick(members())
					for _, u := range ups {
						if !u.attached && (u.owner != who || !u.put) {
							r := users[who].sendFiles(t, cid, "", u.up.ID)
							require.Equal(t, http.StatusBadRequest, r.status, "%s", r)
							break
						}
					}
				case op < 85: // download a file, as anyone
					if len(msgs) == 0 {
						continue
					}
					msg := msgs[rng.IntN(len(msgs))]
					if len(msg.m.Attachments) == 0 {
						continue
					}
					a := msg.m.Attachments[rng.IntN(len(msg.m.Attachments))]
					who := int64(1 + rng.IntN(6))
					removedAt, removed := left[who]
					want := http.StatusOK
					switch {
					case who == 6:
						want = http.StatusForbidden
					case msg.deleted:
						want = http.StatusNotFound
					case removed && removedAt < msg.m.Seq:
						want = http.StatusForbidden
					}
					r := users[who].do(t, "GET", fmt.Sprintf("/v1/conversations/%d/attachments/%s?redirect=false", cid, a.ID), nil)
					require.Equal(t, want, r.status, "user %d, message %d (deleted %v, removed at %d): %s", who, msg.m.Seq, msg.deleted, removedAt, r)
					if want != http.StatusOK {
						continue
					}
					var at protocol.AttachmentURL
					r.decode(t, &at)
					if rng.IntN(4) == 0 { // a forged URL
						res, err := tg.hc.Get(strings.Replace(at.URL, a.ID, uuid.NewString(), 1))
						require.NoError(t, err)
						res.Body.Close()
						require.Equal(t, http.StatusForbidden, res.StatusCode)
						continue
					}
					res, err := tg.hc.Get(at.URL)
					require.NoError(t, err)
					key, _ := base64.RawURLEncoding.DecodeString(a.Key)
					var out bytes.Buffer
					require.NoError(t, sealed.Open(&out, res.Body, a.Size, key))
					res.Body.Close()
					for _, u := range ups {
						if u.up.ID == a.ID {
							require.True(t, bytes.Equal(u.plain, out.Bytes()), "file %s", a.ID)
						}
					}
				case op < 93: // the sender deletes a message with files
					for _, msg := range msgs {
						if msg.deleted || len(msg.m.Attachments) == 0 {
							continue
						}
						if _, gone := left[msg.m.SenderID]; gone {
							continue
						}
						msg.sealedBefore = map[string][]byte{}
						for _, a := range msg.m.Attachments {
							rd, err := store.Open(ctx, objectKey(cid, a.ID))
							require.NoError(t, err)
							raw, err := io.ReadAll(rd)
							require.NoError(t, err)
							rd.Close()
							msg.sealedBefore[a.ID] = raw
						}
						r := users[msg.m.SenderID].do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/messages/%d", cid, msg.m.Seq), nil,
							"Idempotency-Key", uuid.NewString())
						require.Less(t, r.status, 300, "%s", r)
						msg.deleted = true
						break
					}
				default: // the creator removes a member (once, at most two)
					if len(left) >= 2 {
						continue
					}
					var cands []int64
					for _, id := range members() {
						if id != 1 {
							cands = append(cands, id)
						}
					}
					who := pick(cands)
					r := users[1].do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/%d", cid, who), nil)
					require.Equal(t, http.StatusAccepted, r.status, "%s", r)
					// Its position: the member.removed message, as history shows it.
					waitFor(t, 30*time.Second, "the removal's message", func() bool {
						h := users[1].do(t, "GET", fmt.Sprintf("/v1/conversations/%d/messages?limit=5", cid), nil)
						var page protocol.History
						h.decode(t, &page)
						for _, m := range page.Messages {
							var body struct {
								Event  string `json:"event"`
								UserID int64  `json:"user_id"`
							}
							if m.Kind == protocol.MessageSystem && json.Unmarshal(m.Body, &body) == nil &&
								body.Event == "member.removed" && body.UserID == who {
								left[who] = m.Seq
								return true
							}
						}
						return false
					})
				}
			}

			// Some waiting uploads expire; the sweep removes them and the
			// deleted messages' files.
			for _, u := range ups {
				if !u.attached && rng.IntN(2) == 0 {
					_, err := db.Exec(ctx, `UPDATE uploads SET expires_at = now() - interval '1 second' WHERE id = $1`, u.up.ID)
					require.NoError(t, err)
					u.expired = true
				}
			}
			_, err := tg.g.SweepUploads(ctx)
			require.NoError(t, err)
			want := []string{}
			for _, u := range ups {
				if !u.put || u.expired && !u.attached {
					continue
				}
				live := !u.attached
				for _, msg := range msgs {
					for _, a := range msg.m.Attachments {
						if a.ID == u.up.ID {
							live = !msg.deleted
						}
					}
				}
				if live {
					want = append(want, objectKey(cid, u.up.ID))
				}
			}
			stored, err := store.Keys(ctx, "inboxd-")
			require.NoError(t, err)
			require.ElementsMatch(t, want, stored, "the store holds the live messages' files and the waiting uploads'")

			// Nothing left opens a deleted message's files: every key the
			// server keeps (messages, uploads, body keys) is tried on each.
			var keys [][]byte
			for _, q := range []string{
				`SELECT a->>'key' FROM messages m CROSS JOIN LATERAL jsonb_array_elements(COALESCE(m.attachments, '[]')) a`,
				`SELECT encode(key, 'base64') FROM uploads WHERE key IS NOT NULL`,
				`SELECT encode(key, 'base64') FROM body_keys`,
			} {
				rows, err := db.Query(ctx, q)
				require.NoError(t, err)
				for rows.Next() {
					var s string
					require.NoError(t, rows.Scan(&s))
					for _, dec := range []func(string) ([]byte, error){base64.RawURLEncoding.DecodeString, base64.StdEncoding.DecodeString} {
						if k, err := dec(strings.ReplaceAll(s, "\n", "")); err == nil && len(k) == sealed.KeySize {
							keys = append(keys, k, sealed.ThumbnailKey(k))
						}
					}
				}
				require.NoError(t, rows.Err())
			}
			deleted := 0
			for _, msg := range msgs {
				if !msg.deleted {
					continue
				}
				deleted++
				for _, a := range msg.m.Attachments {
					_, err := store.Stat(ctx, objectKey(cid, a.ID))
					require.ErrorIs(t, err, attachments.ErrNotFound, "a deleted message's file is gone")
					for _, k := range keys {
						err := sealed.Open(io.Discard, bytes.NewReader(msg.sealedBefore[a.ID]), a.Size, k)
						require.ErrorIs(t, err, sealed.ErrOpen, "no key left opens file %s", a.ID)
					}
				}
			}
			t.Logf("%d uploads, %d messages (%d deleted), %d members removed, %d keys tried", len(ups), len(msgs), deleted, len(left), len(keys))
			tg.verify(t)
		})
	}
}
