package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/client"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/s3server"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/projector"
	"github.com/inboxd/inboxd/protocol"
)

// The settings of attachments the killed gateways run with: uploads
// expire within the test, and the sweeper comes round often.
const (
	killUploadExpiry = 15 * time.Second
	killURLExpiry    = 5 * time.Second
	killSweep        = 2 * time.Second
)

// killFile is a file a client of TestAttachmentsKilledUnderUploads uploads.
type killFile struct {
	kind        killKind
	name, ctype string
	data        []byte
	w, h        int
	id          string // the upload's, once made
	sum         string // sha256 of data, hex
}

type killKind int

const (
	killPNG    killKind = iota // a PNG image: gets a thumbnail
	killPlain                  // not an image
	killBroken                 // typed image/png but not one: no thumbnail
)

// killMsg is a message a client sent, with the files it attaches.
type killMsg struct {
	conv, seq int64
	msgID     string
	sender    int64
	files     []*killFile
	deleted   bool
}

// Gateways killed with SIGKILL under uploads and sends, against a real
// S3 store (SeaweedFS): two gateways serving the clients (the first
// makes thumbnails, the second does not) and a third that only makes
// thumbnails and sweeps, beside a fanout. SDK clients keep uploading
// small PNG images (random sizes), plain files and files typed image/png
// that are not images, and sending messages that attach them; some
// uploads are never attached, some messages are deleted. The gateways
// are killed at random moments, 16 times, and restarted; the clients
// retry as the SDK does (the outbox keeps a send's msg_id; an upload
// whose creation failed is made again). Afterwards, once the uploads
// left have expired and the sweeper has been round:
//   - every attachment of every live message is in the bucket and opens
//     (downloaded and opened through the SDK) into the bytes sent;
//   - every object in the bucket is a live message's file or its
//     thumbnail, or the file of an upload that has not expired;
//   - every image a live message attaches has one thumbnail, in the
//     bucket, opening into a JPEG of the size announced, applied once
//     (the message's version counts each thumbnail once) and announced
//     to each member by update entries that add a thumbnail each, as
//     sync serves them and as the inbox table holds them;
//   - nothing of a deleted message is left, in the bucket or in uploads.
//
// INBOXD_TEST_SEED=n repeats the choices of a run (not its timing).
func TestAttachmentsKilledUnderUploads(t *testing.T) {
	if testing.Short() {
		t.Skip("kills gateways under uploads for a minute")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("INBOXD_TEST_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (INBOXD_TEST_SEED=%d repeats its choices)", seed, seed)
	rnd := rand.New(rand.NewPCG(seed, 1))

	env := testenv.New(t, testenv.Options{Partitions: 4, Servers: 1})
	testenv.Binary(t)
	s3, err := s3server.Start()
	require.NoError(t, err)
	t.Cleanup(s3.Stop)
	ctx := testenv.Ctx(t, 10*time.Minute)
	const bucket = "kills"
	store, err := attachments.NewS3(ctx, attachments.S3Config{Endpoint: s3.Endpoint, Bucket: bucket,
		AccessKey: s3.AccessKey, SecretKey: s3.SecretKey})
	require.NoError(t, err)
	t.Cleanup(store.Close)

	base := procEnv(env)
	fo := testenv.Start(t, append(slices.Clone(base), "INBOXD_GROUP=attachments", "INBOXD_HTTP_ADDR=127.0.0.1:0"), "fanout")
	ports := []int{testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)}
	gatewayEnv := func(i int, thumbnails bool) []string {
		e := append(killedGatewayEnv(base, ports[i]), "INBOXD_S3_ENDPOINT="+s3.Endpoint, "INBOXD_S3_BUCKET="+bucket,
			"INBOXD_S3_ACCESS_KEY="+s3.AccessKey, "INBOXD_S3_SECRET_KEY="+s3.SecretKey,
			"INBOXD_UPLOAD_EXPIRY="+killUploadExpiry.String(), "INBOXD_UPLOAD_URL_EXPIRY="+killURLExpiry.String(),
			"INBOXD_UPLOAD_SWEEP_INTERVAL="+killSweep.String(), "INBOXD_UPLOAD_QUOTA_FILES=10000")
		if !thumbnails {
			e = append(e, "INBOXD_THUMBNAIL_SIZE=-1")
		}
		return e
	}
	roles := killables{
		{name: "gateway 1 (thumbnails)", port: ports[0], start: func() *testenv.Proc { return testenv.Start(t, gatewayEnv(0, true), "gateway") }},
		{name: "gateway 2", port: ports[1], start: func() *testenv.Proc { return testenv.Start(t, gatewayEnv(1, false), "gateway") }},
		{name: "thumbnail worker", port: ports[2], start: func() *testenv.Proc { return testenv.Start(t, gatewayEnv(2, true), "gateway") }},
	}
	roles.start()
	roles.waitReady(t)
	gwURL := func(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", ports[i]) }

	// Three conversations among six users; users 1-4 send, each through
	// one of the two serving gateways.
	members := map[int64][]int64{}
	for _, ms := range [][]int64{{1, 2, 3, 4}, {2, 3, 5}, {1, 4, 5, 6}} {
		a := &api{t: t, base: gwURL(0), token: token(t, ms[0])}
		code, out, err := a.call("POST", "/v1/conversations", map[string]any{"title": "files", "members": ms[1:]})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, code, "%v", out)
		members[int64(out["conversation_id"].(float64))] = ms
	}
	convsOf := func(u int64) []int64 {
		var cs []int64
		for c, ms := range members {
			if slices.Contains(ms, u) {
				cs = append(cs, c)
			}
		}
		slices.Sort(cs)
		return cs
	}

	senders := []int64{1, 2, 3, 4}
	clients := map[int64]*client.Client{}
	runCtx, stopClients := context.WithCancel(context.Background())
	var runs sync.WaitGroup
	for i, u := range senders {
		c, err := client.New(client.Config{BaseURL: gwURL(i % 2), Token: token(t, u), Logger: testenv.Logger(t),
			StartupJitter: -1, BackoffInitial: 50 * time.Millisecond, BackoffMax: time.Second,
			BreakerThreshold: 1000, BreakerCooldown: time.Second, SendTimeout: 3 * time.Second,
			PendingRecheck: 500 * time.Millisecond, RequestTimeout: 10 * time.Second})
		require.NoError(t, err)
		clients[u] = c
		runs.Add(1)
		go func() {
			defer runs.Done()
			if err := c.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("client of user %d: %v", u, err)
			}
		}()
	}
	stopAll := func() {
		stopClients()
		runs.Wait()
	}
	defer stopAll()

	var (
		mu        sync.Mutex
		msgs      []*killMsg
		abandoned []*killFile
		uploads   atomic.Int64 // uploads made
		redone    atomic.Int64 // uploads whose creation or PUT failed, made again
		deletes   atomic.Int64
		stop      = make(chan struct{})
		workers   sync.WaitGroup
	)
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	// upload uploads f to conv as user u, again after any temporary
	// failure; false once the workload stops first.
	upload := func(u, conv int64, f *killFile) bool {
		c := clients[u]
		for !stopped() {
			uctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			up, err := c.Upload(uctx, conv, client.UploadFile{Name: f.name, ContentType: f.ctype, Size: int64(len(f.data)),
				Body: bytes.NewReader(f.data), SHA256: f.sum, Width: f.w, Height: f.h})
			cancel()
			if err == nil {
				f.id = up.ID
				uploads.Add(1)
				return true
			}
			var ae *client.APIError
			if errors.As(err, &ae) && !ae.Temporary() {
				t.Errorf("user %d: upload of %s to %d refused: %v", u, f.name, conv, err)
				return false
			}
			redone.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
		return false
	}
	// remove deletes m, retrying with its change_id until it applies.
	remove := func(m *killMsg) {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ch := client.Change{Kind: client.ChangeDelete, ConversationID: m.conv, Seq: m.seq}
		for {
			res, err := clients[m.sender].ApplyChange(dctx, ch)
			if err != nil {
				t.Errorf("delete of %d/%d: %v", m.conv, m.seq, err)
				return
			}
			if !res.Pending {
				break
			}
			ch = res.Change // the same change_id, until it is projected
			time.Sleep(200 * time.Millisecond)
		}
		mu.Lock()
		m.deleted = true
		mu.Unlock()
		deletes.Add(1)
	}
	for i, u := range senders {
		r := rand.New(rand.NewPCG(seed, uint64(10+i)))
		workers.Add(1)
		go func() {
			defer workers.Done()
			var mine []*killMsg
			for n := 0; !stopped(); n++ {
				cs := convsOf(u)
				conv := cs[r.IntN(len(cs))]
				var files []*killFile
				for k := range r.IntN(4) {
					files = append(files, killFileOf(r, fmt.Sprintf("u%d-%d-%d", u, n, k)))
				}
				var ids []string
				for i, f := range files {
					if !upload(u, conv, f) {
						// Stopped: the files uploaded are never attached.
						mu.Lock()
						abandoned = append(abandoned, files[:i]...)
						mu.Unlock()
						return
					}
					ids = append(ids, f.id)
				}
				if r.IntN(6) == 0 {
					// An upload never attached: the sweeper removes it at its expiry.
					f := killFileOf(r, fmt.Sprintf("u%d-%d-left", u, n))
					if !upload(u, conv, f) {
						mu.Lock()
						abandoned = append(abandoned, files...)
						mu.Unlock()
						return
					}
					mu.Lock()
					abandoned = append(abandoned, f)
					mu.Unlock()
				}
				body := fmt.Sprintf("user %d message %d", u, n)
				if len(files) > 0 && r.IntN(2) == 0 {
					body = ""
				}
				id, err := clients[u].SendWith(context.Background(), conv, body, client.SendOptions{Attachments: ids})
				if err != nil {
					t.Errorf("user %d: queue a send: %v", u, err)
					return
				}
				wctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				res, err := clients[u].WaitSent(wctx, id)
				cancel()
				if err != nil {
					t.Errorf("user %d: send %s with uploads %v did not end: %v", u, id, ids, err)
					return
				}
				if res.Err != nil {
					t.Errorf("user %d: send %s with uploads %v refused: %v", u, id, ids, res.Err)
					return
				}
				m := &killMsg{conv: conv, seq: res.Message.Seq, msgID: id, sender: u, files: files}
				mu.Lock()
				msgs = append(msgs, m)
				mu.Unlock()
				mine = append(mine, m)
				// Now and then a delete: of this message at once (maybe
				// before its thumbnail), or of an earlier one.
				if r.IntN(5) == 0 {
					victim := mine[r.IntN(len(mine))]
					if r.IntN(2) == 0 {
						victim = m
					}
					mu.Lock()
					done := victim.deleted
					mu.Unlock()
					if !done {
						remove(victim)
					}
				}
				time.Sleep(time.Duration(r.IntN(150)) * time.Millisecond)
			}
		}()
	}

	// The kills: every 1 to 3.5 s a random one of the three, killed and
	// started again after up to half a second.
	const nKills = 16
	work := time.Now()
	kills := roles.kill(rnd, killPlan{n: nKills, pause: time.Second, spread: 2500 * time.Millisecond, down: 500 * time.Millisecond})
	close(stop)
	workers.Wait()
	stopAll()
	require.False(t, t.Failed())
	t.Logf("the workload ran %v", time.Since(work).Round(time.Millisecond))
	roles.waitReady(t)

	// Settled: the log projected, every wanted thumbnail made (a worker
	// killed holding a lease leaves it for a minute) and projected, and
	// every upload left expired and swept.
	settle := time.Now()
	db := env.Pool
	env.WaitCaughtUp(t, 2*time.Minute)
	count := func(q string, args ...any) int64 {
		var n int64
		require.NoError(t, db.QueryRow(ctx, q, args...).Scan(&n))
		return n
	}
	// waitNone waits until no upload matches where, and says how long
	// that took; after timeout it fails with some that still do.
	waitNone := func(timeout time.Duration, what, where string) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			n := count(`SELECT count(*) FROM uploads WHERE ` + where)
			if n == 0 {
				return time.Since(start).Round(time.Millisecond)
			}
			if time.Since(start) > timeout {
				var some string
				require.NoError(t, db.QueryRow(ctx, `SELECT string_agg(format('%s %s thumbnail %s lease %s expires %s', id, state,
	thumbnail, thumbnail_lease, expires_at), '; ') FROM (SELECT * FROM uploads WHERE `+where+` LIMIT 10) u`).Scan(&some))
				t.Fatalf("%d uploads are still %s after %v: %s", n, what, timeout, some)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	thumbsTook := waitNone(2*time.Minute, "waiting for a thumbnail", `state = 'attached' AND thumbnail = 'wanted'`)
	env.WaitCaughtUp(t, 2*time.Minute)
	var lastExpiry time.Time
	require.NoError(t, db.QueryRow(ctx, `SELECT COALESCE(max(expires_at), now()) FROM uploads WHERE msg_id IS NULL`).Scan(&lastExpiry))
	time.Sleep(time.Until(lastExpiry.Add(2 * killSweep)))
	sweptTook := waitNone(time.Minute, "to be swept", `state IN ('erased', 'removing') OR state = 'open' AND expires_at < now()`)
	t.Logf("settled %v after the workload: the thumbnails wanted made in %v; the uploads left swept %v after their last expiry and two sweep intervals",
		time.Since(settle).Round(time.Millisecond), thumbsTook, sweptTook)

	// What the database says of every message the clients sent.
	type dbAttachment struct {
		protocol.Attachment
		object, state string
		thumb         *string
	}
	type dbMsg struct {
		deleted bool
		version int64
		atts    []dbAttachment
	}
	got := map[string]*dbMsg{}
	rows, err := db.Query(ctx, `SELECT msg_id::text, deleted, version, COALESCE(attachments, '[]'::jsonb) FROM messages WHERE kind = 'text'`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var raw []byte
		m := &dbMsg{}
		require.NoError(t, rows.Scan(&id, &m.deleted, &m.version, &raw))
		var as []protocol.Attachment
		require.NoError(t, json.Unmarshal(raw, &as))
		for _, a := range as {
			m.atts = append(m.atts, dbAttachment{Attachment: a})
		}
		got[id] = m
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, len(msgs), "every text projected is a send that got its seq")
	for _, m := range got {
		for i := range m.atts {
			a := &m.atts[i]
			require.NoError(t, db.QueryRow(ctx, `SELECT object_key, state, thumbnail FROM uploads WHERE id = $1::uuid`, a.ID).
				Scan(&a.object, &a.state, &a.thumb), "the upload of attachment %s", a.ID)
		}
	}
	keys, err := store.Keys(ctx, "")
	require.NoError(t, err)
	inBucket := map[string]bool{}
	uploadsInBucket := map[string]bool{} // by upload id: the file's or thumbnail's key ends with it
	for _, k := range keys {
		inBucket[k] = true
		if k = strings.TrimSuffix(k, "-thumb"); len(k) >= 36 {
			uploadsInBucket[k[len(k)-36:]] = true
		}
	}
	require.Zero(t, count(`SELECT count(*) FROM uploads WHERE state = 'open' AND msg_id IS NOT NULL`),
		"every upload a send claimed is attached to its message (each send was retried until it had a seq)")

	// Every object in the bucket is accounted for.
	allowed := map[string]bool{}
	for _, m := range got {
		if m.deleted {
			continue
		}
		for _, a := range m.atts {
			allowed[a.object] = true
			if a.Thumbnail != nil {
				allowed[a.object+"-thumb"] = true // gateway/thumbnails.go's place of a thumbnail
			}
		}
	}
	rows, err = db.Query(ctx, `SELECT object_key FROM uploads WHERE state = 'open' AND expires_at > now()`)
	require.NoError(t, err)
	waiting := 0
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		allowed[k] = true
		waiting++
	}
	require.NoError(t, rows.Err())
	for _, k := range keys {
		require.True(t, allowed[k], "object %s in the bucket is no live message's file or thumbnail and no waiting upload's", k)
	}

	// Every message as sent; its files in the bucket, or gone with it.
	var images, plains, broken, deleted int
	for _, m := range msgs {
		g := got[m.msgID]
		require.NotNil(t, g, "message %s (%d/%d) is projected", m.msgID, m.conv, m.seq)
		require.Equal(t, m.deleted, g.deleted, "message %s deleted", m.msgID)
		if m.deleted {
			deleted++
			require.Empty(t, g.atts, "a deleted message %s shows no attachment", m.msgID)
			for _, f := range m.files {
				require.False(t, uploadsInBucket[f.id], "the objects of upload %s of deleted message %s are removed", f.id, m.msgID)
				require.Zero(t, count(`SELECT count(*) FROM uploads WHERE id = $1::uuid`, f.id), "upload %s of deleted message %s is removed", f.id, m.msgID)
			}
			continue
		}
		require.Len(t, g.atts, len(m.files), "message %s keeps every file it attached", m.msgID)
		wantImages := 0
		for i, f := range m.files {
			a := g.atts[i]
			require.Equal(t, f.id, a.ID)
			require.Equal(t, f.sum, a.SHA256)
			require.Equal(t, "attached", a.state, "upload %s", a.ID)
			require.True(t, inBucket[a.object], "the file of attachment %s of live message %s is in the bucket", a.ID, m.msgID)
			switch f.kind {
			case killPNG:
				images++
				wantImages++
				require.NotNil(t, a.Thumbnail, "image %s of live message %s has its thumbnail", a.ID, m.msgID)
				require.Equal(t, "done", *a.thumb, "image %s", a.ID)
				require.True(t, inBucket[a.object+"-thumb"], "the thumbnail of image %s is in the bucket", a.ID)
				require.Equal(t, int64(1), count(`SELECT count(*) FROM changes WHERE change_id = $1 AND seq = $2`,
					gateway.ThumbnailChangeID(a.ID), m.seq), "the thumbnail of %s is applied", a.ID)
			case killPlain, killBroken:
				if f.kind == killBroken {
					broken++
					require.Equal(t, "failed", *a.thumb, "an image that is none (%s)", a.ID)
				} else {
					plains++
					require.Nil(t, a.thumb, "no thumbnail wanted of %s", a.ID)
				}
				require.Nil(t, a.Thumbnail, "attachment %s", a.ID)
				require.False(t, inBucket[a.object+"-thumb"], "no thumbnail of %s in the bucket", a.ID)
			}
		}
		// No other change of a live message: each thumbnail adds one to
		// its version, exactly once.
		require.Equal(t, int64(1+wantImages), g.version, "message %s: one version per thumbnail", m.msgID)
	}
	for _, f := range abandoned {
		require.Zero(t, count(`SELECT count(*) FROM uploads WHERE id = $1::uuid`, f.id), "upload %s never attached is removed", f.id)
		require.False(t, uploadsInBucket[f.id], "the object of upload %s, never attached, is removed", f.id)
	}

	// Every live message's file opens into the bytes sent, and every
	// thumbnail into a JPEG of the size announced, through the SDK.
	readers := map[int64]*client.Client{}
	for u := int64(1); u <= 6; u++ {
		c, err := client.New(client.Config{BaseURL: gwURL(int(u) % 2), Token: token(t, u)})
		require.NoError(t, err)
		readers[u] = c
	}
	var eg errgroup.Group
	eg.SetLimit(4)
	for _, m := range msgs {
		if m.deleted {
			continue
		}
		g := got[m.msgID]
		// Read by another member than the sender.
		reader := members[m.conv][0]
		if reader == m.sender {
			reader = members[m.conv][1]
		}
		c := readers[reader]
		for i, f := range m.files {
			a := g.atts[i].Attachment
			eg.Go(func() error {
				var buf bytes.Buffer
				if err := c.Download(ctx, m.conv, a, &buf); err != nil {
					return fmt.Errorf("download %s of %s: %w", a.ID, m.msgID, err)
				}
				if sum := sha256.Sum256(buf.Bytes()); hex.EncodeToString(sum[:]) != f.sum {
					return fmt.Errorf("attachment %s of %s opens into other bytes", a.ID, m.msgID)
				}
				if a.Thumbnail == nil {
					return nil
				}
				buf.Reset()
				if err := c.DownloadThumbnail(ctx, m.conv, a, &buf); err != nil {
					return fmt.Errorf("thumbnail of %s of %s: %w", a.ID, m.msgID, err)
				}
				cfg, err := jpeg.DecodeConfig(&buf)
				if err != nil {
					return fmt.Errorf("thumbnail of %s: %w", a.ID, err)
				}
				if cfg.Width != a.Thumbnail.Width || cfg.Height != a.Thumbnail.Height {
					return fmt.Errorf("thumbnail of %s is %dx%d, announced %dx%d", a.ID, cfg.Width, cfg.Height,
						a.Thumbnail.Width, a.Thumbnail.Height)
				}
				return nil
			})
		}
	}
	require.NoError(t, eg.Wait())

	// The update entries of live messages, as each member's sync serves
	// them and as the inbox holds them: only thumbnails change a live
	// message, so each entry adds at least one (its version is one a
	// thumbnail wrote, higher than the entry before), and the last shows
	// them all. A message with one image gets exactly one.
	bySeq := map[[2]int64]*killMsg{}
	for _, m := range msgs {
		bySeq[[2]int64{m.conv, m.seq}] = m
	}
	for u := int64(1); u <= 6; u++ {
		served := map[[2]int64]int{}
		entries, _ := syncAll(t, gwURL(int(u)%2), u)
		for _, e := range entries {
			if e.Kind == protocol.KindUpdate {
				served[[2]int64{e.ConversationID, e.Message.Seq}]++
			}
		}
		held := map[[2]int64][]int64{}
		rows, err := db.Query(ctx, `SELECT conversation_id, seq, version FROM inbox WHERE user_id = $1 AND kind = 3 ORDER BY inbox_seq`, u)
		require.NoError(t, err)
		for rows.Next() {
			var c, s, v int64
			require.NoError(t, rows.Scan(&c, &s, &v))
			held[[2]int64{c, s}] = append(held[[2]int64{c, s}], v)
		}
		require.NoError(t, rows.Err())
		for key, m := range bySeq {
			if m.deleted || !slices.Contains(members[m.conv], u) {
				continue
			}
			vs := held[key]
			require.Equal(t, len(vs), served[key], "user %d, message %d/%d: sync serves the update entries the inbox holds", u, key[0], key[1])
			n := 0
			for _, f := range m.files {
				if f.kind == killPNG {
					n++
				}
			}
			if n == 0 {
				require.Empty(t, vs, "user %d: no update entry of message %d/%d, which has no image", u, key[0], key[1])
				continue
			}
			require.NotEmpty(t, vs, "user %d: an update entry announces the thumbnails of %d/%d", u, key[0], key[1])
			require.LessOrEqual(t, len(vs), n, "user %d, message %d/%d: at most one update entry per thumbnail", u, key[0], key[1])
			require.True(t, slices.IsSorted(vs) && len(slices.Compact(slices.Clone(vs))) == len(vs) && vs[0] >= 2,
				"user %d, message %d/%d: each update entry adds a thumbnail (versions %v)", u, key[0], key[1], vs)
			require.Equal(t, int64(1+n), vs[len(vs)-1], "user %d, message %d/%d: the last update entry announces every thumbnail", u, key[0], key[1])
		}
	}

	rep, err := projector.Verify(ctx, db)
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
	roles.stop(t)
	require.NoError(t, fo.Stop(20*time.Second), fo.Output())
	attached := 0
	for _, m := range msgs {
		attached += len(m.files)
	}
	t.Logf("seed %d: %d kills %v; %d uploads made (%d creations or PUTs made again), %d never attached; %d sends (%d files attached: %d images with their thumbnail, %d plain files, %d non-images typed image/png), %d deleted; %d objects in the bucket at the end (%d of uploads still waiting)",
		seed, nKills, kills, uploads.Load(), redone.Load(), len(abandoned), len(msgs), attached, images, plains, broken, deleted,
		len(keys), waiting)
}

// killFileOf makes a random file: mostly small PNG images of random sizes,
// some plain files (up to a few chunks of the sealed form), and now and
// then bytes that claim to be a PNG.
func killFileOf(r *rand.Rand, name string) *killFile {
	f := &killFile{}
	switch n := r.IntN(10); {
	case n < 6:
		f.kind, f.ctype, f.name = killPNG, "image/png", name+".png"
		f.w, f.h = 1+r.IntN(480), 1+r.IntN(360)
		img := image.NewRGBA(image.Rect(0, 0, f.w, f.h))
		for range 1 + r.IntN(5) {
			c := color.RGBA{uint8(r.IntN(256)), uint8(r.IntN(256)), uint8(r.IntN(256)), 255}
			box := image.Rect(r.IntN(f.w), r.IntN(f.h), 1+r.IntN(f.w), 1+r.IntN(f.h)).Canon()
			draw.Draw(img, box, &image.Uniform{C: c}, image.Point{}, draw.Src)
		}
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			panic(err)
		}
		f.data = buf.Bytes()
	case n < 9:
		f.kind, f.name = killPlain, name+".bin"
		f.ctype = []string{"application/pdf", "text/plain", "application/octet-stream"}[r.IntN(3)]
		f.data = make([]byte, 1+r.IntN(150_000))
		for i := range f.data {
			f.data[i] = byte(r.Uint32())
		}
	default:
		f.kind, f.ctype, f.name = killBroken, "image/png", name+".png"
		f.data = make([]byte, 1+r.IntN(2000))
		for i := range f.data {
			f.data[i] = byte(r.Uint32())
		}
	}
	sum := sha256.Sum256(f.data)
	f.sum = hex.EncodeToString(sum[:])
	return f
}
