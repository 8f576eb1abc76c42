package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/image/draw"

	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/protocol"
	"github.com/inboxd/inboxd/protocol/sealed"
)

// ThumbnailsResult is the thumbnails figure: how fast a gateway's worker
// turns sent images into announced thumbnails, next to the same image
// work done by the bench process itself.
type ThumbnailsResult struct {
	// The image: its size in pixels, bytes and JPEG quality.
	Width      int   `json:"width"`
	Height     int   `json:"height"`
	ImageBytes int64 `json:"image_bytes"`
	Quality    int   `json:"quality"`
	// ThumbWidth, ThumbHeight and ThumbBytes are those of the thumbnail
	// the gateway made (the one downloaded and opened at the end).
	ThumbWidth  int   `json:"thumb_width"`
	ThumbHeight int   `json:"thumb_height"`
	ThumbBytes  int64 `json:"thumb_bytes"`
	// Interval is the worker's polling interval of the burst and of Lone
	// (the gateway's default), ShortInterval that of LoneShort, in ms.
	Interval      float64 `json:"interval_ms"`
	ShortInterval float64 `json:"short_interval_ms"`

	// The burst: Images images sent Concurrency at once (their uploads
	// made beforehand), from the first send until the last thumbnail is
	// announced on the other member's WebSocket: Seconds, PerSec.
	Images  int     `json:"images"`
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"per_sec"`
	// Latency is each image's send answer -> its thumbnail's announcement
	// in the burst: mostly the wait behind the images before it. Spacing
	// is the time between the burst's first announcement and its last
	// over the images after the first, in ms: the worker's time per
	// thumbnail once it runs, without the wait for its first round.
	Latency Dist    `json:"latency"`
	Spacing float64 `json:"spacing_ms"`
	// Announced counts the burst's images whose thumbnail was announced,
	// Updates the update entries that announced one (one per image when
	// none is announced twice), Done the images whose upload the store
	// of record marks done (every image of every phase).
	Announced int   `json:"announced"`
	Updates   int   `json:"updates"`
	Done      int   `json:"done"`
	Reconns   int64 `json:"reconnects"`
	// GatewayCPUPerThumb is the gateway's CPU over the burst per image,
	// in milliseconds (the sends' API calls included).
	GatewayCPUPerThumb float64 `json:"gateway_cpu_ms_per_thumb"`

	// Lone images, each sent after a random part of an interval once the
	// last one's thumbnail was announced: send answer -> announcement
	// with the worker polling every Interval (Lone) and every
	// ShortInterval (LoneShort, a second gateway).
	Lone      Dist `json:"lone"`
	LoneShort Dist `json:"lone_short"`

	// Reference is the bench process decoding the same image, scaling
	// it and encoding the thumbnail as the worker does, one at a time on
	// one goroutine (wall time); RefPerSec its rate; RefCPU the bench
	// process's CPU per image over those runs, in ms, the figure to set
	// against the gateway's CPU when the machine is shared (wall time
	// then includes waits for a core, CPU time does not).
	Reference Dist    `json:"reference"`
	RefPerSec float64 `json:"reference_per_sec"`
	RefCPU    float64 `json:"reference_cpu_ms"`
}

// attachmentThumbnails runs the thumbnail phases: the reference, then on
// gw (the worker at its default interval) the burst and the lone images,
// then on a second gateway (short, which the function starts and stops;
// gw is stopped first, so that one worker runs at a time) lone images
// again; at the end the store of record must mark every image's
// thumbnail made.
func attachmentThumbnails(ctx context.Context, env *Env, cfg AttachmentsConfig, pl *pipeline, convs []e2eConv, tokens []string,
	secret string, hc *http.Client, gw *child, ready serveReady, short serveConfig, res *ThumbnailsResult) error {
	pr := env.Progress
	progressf(pr, "bench attachments: drawing a %dx%d photo of about %d bytes", cfg.ImageWidth, cfg.ImageHeight, cfg.ImageSize)
	photo, q, err := photoJPEG(cfg.ImageWidth, cfg.ImageHeight, cfg.ImageSize, 1)
	if err != nil {
		return err
	}
	res.Width, res.Height, res.ImageBytes, res.Quality = cfg.ImageWidth, cfg.ImageHeight, int64(len(photo)), q
	res.Interval, res.ShortInterval = msOf(gateway.DefaultThumbnailInterval), msOf(cfg.ShortInterval)
	runs := min(max(cfg.Images, 3), 30)
	progressf(pr, "bench attachments: the reference: %d thumbnails of the photo (%d bytes, quality %d) made by the bench, one at a time",
		runs, len(photo), q)
	cpu0 := cpuSeconds(os.Getpid())
	ref, err := thumbnailReference(photo, runs)
	if err != nil {
		return err
	}
	res.RefCPU = (cpuSeconds(os.Getpid()) - cpu0) / float64(runs) * 1e3
	res.Reference = newDist(ref)
	res.RefPerSec = div(float64(len(ref)), total(ref)/1e3)
	progressf(pr, "bench attachments: the reference: %.1f thumbnails/s, p50 %s, %s CPU each", res.RefPerSec, ms(res.Reference.P50), ms(res.RefCPU))

	g := newThumbGateway(ready.Addr, hc, convs, tokens, photo)
	w, stopWatch, err := g.watch(ctx, pl.pool, secret)
	if err != nil {
		return err
	}
	msgs, err := thumbBurst(ctx, g, w, ready.Pid, cfg.Images, cfg.Concurrency, pr, res)
	if err != nil {
		stopWatch()
		return err
	}
	ids := make([]string, 0, cfg.Images+2*cfg.Lone)
	for _, m := range msgs {
		ids = append(ids, m.Attachments[0].ID)
	}
	rng := rand.New(rand.NewPCG(2, 0))
	lone, loneIDs, err := thumbLone(ctx, g, w, cfg.Lone, gateway.DefaultThumbnailInterval, rng, pr)
	stopWatch()
	res.Reconns += w.reconns.Load()
	if err != nil {
		return err
	}
	res.Lone, ids = lone, append(ids, loneIDs...)

	// The thumbnail of the burst's last image, as its reader downloads it.
	last := msgs[len(msgs)-1]
	var reader int64
	for _, c := range convs {
		if c.ID == last.ConversationID {
			reader = c.Members[1]
		}
	}
	tc, tsize, err := openThumbnail(ctx, g, secret, reader, last)
	if err != nil {
		return err
	}
	ann := w.thumbnail(last.Attachments[0].ID)
	if tc.Width != ann.Width || tc.Height != ann.Height || tsize != ann.Size {
		return fmt.Errorf("the thumbnail downloaded is %dx%d of %d bytes, announced %dx%d of %d",
			tc.Width, tc.Height, tsize, ann.Width, ann.Height, ann.Size)
	}
	res.ThumbWidth, res.ThumbHeight, res.ThumbBytes = tc.Width, tc.Height, tsize
	if err := gw.stop(20 * time.Second); err != nil {
		return fmt.Errorf("stop the gateway: %w", err)
	}

	progressf(pr, "bench attachments: a second gateway, its worker polling every %s", msText(res.ShortInterval))
	gw2, ready2, err := startServe(ctx, env, "gateway-short", short)
	if err != nil {
		return err
	}
	defer gw2.kill()
	g2 := newThumbGateway(ready2.Addr, hc, convs, tokens, photo)
	w2, stopWatch2, err := g2.watch(ctx, pl.pool, secret)
	if err != nil {
		return err
	}
	lone, loneIDs, err = thumbLone(ctx, g2, w2, cfg.Lone, cfg.ShortInterval, rng, pr)
	stopWatch2()
	res.Reconns += w2.reconns.Load()
	if err != nil {
		return err
	}
	res.LoneShort, ids = lone, append(ids, loneIDs...)
	if res.Done, err = thumbnailsDone(ctx, pl.pool, ids); err != nil {
		return err
	}
	_ = gw2.stop(20 * time.Second)
	return nil
}

// total is the sum of v.
func total(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

// rows are the thumbnails figure's rows of the attachments table.
func (t ThumbnailsResult) rows(concurrency int) []Row {
	img := fmt.Sprintf("%dx%d JPEG photos of %.1f MiB", t.Width, t.Height, float64(t.ImageBytes)/(1<<20))
	every := func(v float64) string { return "every " + msText(v) }
	return []Row{
		{Figure: fmt.Sprintf("thumbnails/s: %d %s sent %d at once, until each thumbnail (%dx%d JPEG) is announced on the other member's WebSocket; one worker per gateway, polling %s",
			t.Images, img, concurrency, t.ThumbWidth, t.ThumbHeight, every(t.Interval)),
			Value:     fmt.Sprintf("%.1f/s", t.PerSec),
			Reference: fmt.Sprintf("the bench decoding, scaling and encoding the same photo, one at a time: %.1f/s", t.RefPerSec),
			Ratio:     ratio(t.PerSec, t.RefPerSec)},
		{Figure: "the worker's time per thumbnail in that burst, from one announcement to the next (read, open, decode, scale, encode, seal, put, append; projection and push overlap the next)",
			Value:     ms(t.Spacing),
			Reference: "the image work alone (the bench), p50 / p99: " + ms(t.Reference.P50) + " / " + ms(t.Reference.P99),
			Ratio:     "p50 " + ratio(t.Spacing, t.Reference.P50)},
		{Figure: "a photo's send answer -> thumbnail announced in that burst, p50 / p99 (mostly the wait behind the photos sent before it)",
			Value:     ms(t.Latency.P50) + " / " + ms(t.Latency.P99),
			Reference: fmt.Sprintf("the burst's length: %s", ms(t.Seconds*1e3)),
			Ratio:     "p99 " + ratio(t.Latency.P99, t.Seconds*1e3)},
		{Figure: fmt.Sprintf("a lone photo's send answer -> thumbnail announced, p50 / p99 (%d photos, one at a time, each sent at a random point of the worker's round), worker polling %s (the gateway's default)",
			t.Lone.N, every(t.Interval)),
			Value:     ms(t.Lone.P50) + " / " + ms(t.Lone.P99),
			Reference: fmt.Sprintf("the same on a second gateway polling %s: %s / %s", every(t.ShortInterval), ms(t.LoneShort.P50), ms(t.LoneShort.P99)),
			Ratio:     "p50 " + ratio(t.Lone.P50, t.LoneShort.P50)},
		{Figure: "the gateway's CPU per thumbnail in the burst (the worker's whole round, and the photo's send)",
			Value:     ms(t.GatewayCPUPerThumb),
			Reference: "the bench's CPU per photo for the image work alone: " + ms(t.RefCPU),
			Ratio:     ratio(t.GatewayCPUPerThumb, t.RefCPU)},
	}
}

// msText is an interval in ms as a reader says it.
func msText(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%g s", v/1000)
	}
	return fmt.Sprintf("%g ms", v)
}

// thumbnailWork makes the thumbnail of a JPEG, PNG, GIF or WebP the way
// the gateway's worker does (gateway/thumbnails.go: the canvas checked,
// decoded, scaled with Catmull-Rom to fit limit, encoded as a JPEG at
// quality 80), without the store, the seal or the log around it.
func thumbnailWork(file []byte, limit int) ([]byte, error) {
	if _, _, err := image.DecodeConfig(bytes.NewReader(file)); err != nil {
		return nil, err
	}
	img, _, err := image.Decode(bytes.NewReader(file))
	if err != nil {
		return nil, err
	}
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	if w > limit || h > limit {
		if w >= h {
			w, h = limit, max(1, h*limit/b.Dx())
		} else {
			w, h = max(1, w*limit/b.Dy()), limit
		}
	}
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.CatmullRom.Scale(dst, dst.Bounds(), img, b, draw.Src, nil)
	var out bytes.Buffer
	if err := jpeg.Encode(&out, dst, &jpeg.Options{Quality: 80}); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// thumbnailReference times thumbnailWork on photo n times, one after the
// other on this goroutine, in ms.
func thumbnailReference(photo []byte, n int) ([]float64, error) {
	var times []float64
	for range n {
		t0 := time.Now()
		if _, err := thumbnailWork(photo, gateway.DefaultThumbnailSize); err != nil {
			return nil, fmt.Errorf("the reference thumbnail: %w", err)
		}
		times = append(times, msOf(time.Since(t0)))
	}
	return times, nil
}

// thumbWatch records, from the WebSockets of the conversations' other
// members, when each attachment's thumbnail was first seen and how many
// update entries announced it. Safe for concurrent use.
type thumbWatch struct {
	mu      sync.Mutex
	seen    map[string]int64 // attachment id -> unix ns of the first entry with its thumbnail
	updates map[string]int   // attachment id -> update entries carrying its thumbnail
	thumbs  map[string]protocol.Thumbnail
	reconns atomic.Int64
}

func newThumbWatch() *thumbWatch {
	return &thumbWatch{seen: map[string]int64{}, updates: map[string]int{}, thumbs: map[string]protocol.Thumbnail{}}
}

// thumbFrame is what the watch reads of a frame.
type thumbFrame struct {
	Type    string `json:"type"`
	Head    int64  `json:"head"`
	Entries []struct {
		InboxSeq int64             `json:"inbox_seq"`
		Kind     string            `json:"kind"`
		Message  *protocol.Message `json:"message"`
	} `json:"entries"`
}

// frame is a wsFollower's frame function.
func (w *thumbWatch) frame(data []byte, now int64) (string, int64) {
	var f thumbFrame
	if json.Unmarshal(data, &f) != nil {
		return "", 0
	}
	if f.Type != "entries" {
		return f.Type, f.Head
	}
	var cursor int64
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range f.Entries {
		cursor = max(cursor, e.InboxSeq)
		if e.Message == nil {
			continue
		}
		for _, a := range e.Message.Attachments {
			if a.Thumbnail == nil {
				continue
			}
			// A message entry read after its thumbnail was made carries
			// it too: the first entry that does is the announcement.
			if _, ok := w.seen[a.ID]; !ok {
				w.seen[a.ID], w.thumbs[a.ID] = now, *a.Thumbnail
			}
			if e.Kind == protocol.KindUpdate {
				w.updates[a.ID]++
			}
		}
	}
	return f.Type, cursor
}

// announced is when attachment id's thumbnail was first seen.
func (w *thumbWatch) announced(id string) (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.seen[id]
	return t, ok
}

// thumbnail is the thumbnail first announced of attachment id.
func (w *thumbWatch) thumbnail(id string) protocol.Thumbnail {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.thumbs[id]
}

// count is how many of ids were announced, the first and the last
// announcement among them, and the update entries that announced them.
func (w *thumbWatch) count(ids []string) (n int, first, last int64, updates int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if t, ok := w.seen[id]; ok {
			if n == 0 || t < first {
				first = t
			}
			n++
			last = max(last, t)
		}
		updates += w.updates[id]
	}
	return n, first, last, updates
}

// thumbGateway is what the thumbnail phases need of one gateway under test.
type thumbGateway struct {
	base   string // http://addr
	addr   string
	hc     *http.Client
	convs  []e2eConv
	tokens []string // of each conversation's sender, Members[0]
	photo  []byte
	sum    string // the photo's SHA-256, hex
}

// imageUpload is an image uploaded and not sent yet.
type imageUpload struct {
	id   string
	conv int // index into convs
}

// watch connects the WebSocket of every conversation's other member
// (Members[1]), from its head, to a new thumbWatch.
func (g *thumbGateway) watch(ctx context.Context, pool *pgxpool.Pool, secret string) (*thumbWatch, func(), error) {
	w := newThumbWatch()
	var fs []*wsFollower
	for _, c := range g.convs {
		u := c.Members[1]
		var head int64
		if err := pool.QueryRow(ctx, `SELECT coalesce((SELECT inbox_seq FROM users WHERE id = $1), 0)`, u).Scan(&head); err != nil {
			return nil, nil, fmt.Errorf("head of user %d: %w", u, err)
		}
		tok, err := gateway.IssueToken([]byte(secret), u, time.Hour)
		if err != nil {
			return nil, nil, err
		}
		fs = append(fs, &wsFollower{dialer: websocket.DefaultDialer, addr: g.addr, tok: tok, reconns: &w.reconns,
			start: head, frame: w.frame})
	}
	stop, err := followAll(ctx, fs, len(fs))
	if err != nil {
		return nil, nil, err
	}
	return w, stop, nil
}

// upload asks for an upload of the photo in conversation c and PUTs it
// sealed; the message that attaches it is sent later.
func (g *thumbGateway) upload(ctx context.Context, c int) (imageUpload, error) {
	var up protocol.Upload
	if err := callJSON(ctx, g.hc, http.MethodPost, fmt.Sprintf("%s/v1/conversations/%d/uploads", g.base, g.convs[c].ID), g.tokens[c],
		protocol.UploadRequest{Name: "photo.jpg", ContentType: "image/jpeg", Size: int64(len(g.photo)), SHA256: g.sum},
		http.StatusCreated, &up); err != nil {
		return imageUpload{}, err
	}
	k, err := base64.RawURLEncoding.DecodeString(up.Key)
	if err != nil {
		return imageUpload{}, err
	}
	rd, pw := io.Pipe()
	go func() { pw.CloseWithError(sealed.Seal(pw, bytes.NewReader(g.photo), int64(len(g.photo)), k)) }()
	h := http.Header{}
	for name, v := range up.Headers {
		h.Set(name, v)
	}
	if err := put(ctx, g.hc, up.Method, up.URL, h, rd, up.SealedSize); err != nil {
		rd.CloseWithError(err)
		return imageUpload{}, err
	}
	return imageUpload{id: up.ID, conv: c}, nil
}

// send sends a message attaching u and returns the answer and its time.
func (g *thumbGateway) send(ctx context.Context, u imageUpload) (protocol.Message, time.Time, error) {
	var m protocol.Message
	err := callJSON(ctx, g.hc, http.MethodPost, fmt.Sprintf("%s/v1/conversations/%d/messages", g.base, g.convs[u.conv].ID),
		g.tokens[u.conv], protocol.SendMessage{MsgID: uuid.NewString(), Attachments: []string{u.id}}, http.StatusCreated, &m)
	if err == nil && (len(m.Attachments) != 1 || m.Attachments[0].ID != u.id) {
		err = fmt.Errorf("message %d/%d does not attach upload %s", m.ConversationID, m.Seq, u.id)
	}
	return m, time.Now(), err
}

// thumbStall is how long a wait for thumbnails goes without a new one
// before it gives up: many times an interval plus an image's work.
const thumbStall = time.Minute

// waitAnnounced waits until every one of ids is announced, printing the
// progress every few seconds when label is not empty.
func waitAnnounced(ctx context.Context, w *thumbWatch, ids []string, pr io.Writer, label string, t0 time.Time) error {
	lastN, lastChange, lastPrint := -1, time.Now(), time.Now()
	for {
		n, _, _, _ := w.count(ids)
		if n == len(ids) {
			return nil
		}
		now := time.Now()
		if n != lastN {
			lastN, lastChange = n, now
		}
		if now.Sub(lastChange) > thumbStall {
			return fmt.Errorf("%d of %d thumbnails announced, none more for %s", n, len(ids), thumbStall)
		}
		if label != "" && now.Sub(lastPrint) >= 3*time.Second {
			lastPrint = now
			el := now.Sub(t0).Seconds()
			progressf(pr, "bench attachments: %s: %d/%d thumbnails announced after %.1f s (%.1f/s)", label, n, len(ids), el, float64(n)/el)
		}
		if !sleepCtx(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// thumbBurst uploads n images, then sends them concurrency at once and
// waits until every thumbnail is announced; it returns the images'
// attachments (as the sends answered them).
func thumbBurst(ctx context.Context, g *thumbGateway, w *thumbWatch, pid int, n, concurrency int, pr io.Writer, res *ThumbnailsResult) ([]protocol.Message, error) {
	progressf(pr, "bench attachments: uploading %d images of %d bytes for the thumbnails, %d at once", n, len(g.photo), concurrency)
	ups := make([]imageUpload, n)
	if _, err := parallelTimes(ctx, n, concurrency, func(i, wk int) error {
		var err error
		ups[i], err = g.upload(ctx, wk)
		return err
	}); err != nil {
		return nil, fmt.Errorf("image uploads: %w", err)
	}
	progressf(pr, "bench attachments: sending the %d images, %d at once; the worker polls every %s", n, concurrency, msText(res.Interval))
	ids := make([]string, n)
	for i, u := range ups {
		ids[i] = u.id
	}
	msgs := make([]protocol.Message, n)
	acked := make([]time.Time, n)
	meter := newCPUMeter(map[string]func() []int{"gateway": func() []int { return []int{pid} }})
	t0 := time.Now()
	if _, err := parallelTimes(ctx, n, concurrency, func(i, _ int) error {
		var err error
		msgs[i], acked[i], err = g.send(ctx, ups[i])
		return err
	}); err != nil {
		return nil, fmt.Errorf("image sends: %w", err)
	}
	if err := waitAnnounced(ctx, w, ids, pr, "burst", t0); err != nil {
		return nil, fmt.Errorf("burst: %w", err)
	}
	cpu := meter.stop()
	announced, first, last, updates := w.count(ids)
	if n > 1 {
		res.Spacing = msOf(time.Duration(last-first)) / float64(n-1)
	}
	res.Images, res.Announced, res.Updates = n, announced, updates
	res.Seconds = time.Unix(0, last).Sub(t0).Seconds()
	res.PerSec = div(float64(n), res.Seconds)
	if len(cpu) == 1 {
		res.GatewayCPUPerThumb = cpu[0].Seconds / float64(n) * 1e3
	}
	lat := make([]float64, n)
	for i, id := range ids {
		t, _ := w.announced(id)
		lat[i] = msOf(time.Unix(0, t).Sub(acked[i]))
	}
	res.Latency = newDist(lat)
	progressf(pr, "bench attachments: burst: %d thumbnails in %.1f s (%.1f/s, %s apart), send -> announced p50 %s p99 %s, gateway %s CPU per thumbnail",
		n, res.Seconds, res.PerSec, ms(res.Spacing), ms(res.Latency.P50), ms(res.Latency.P99), ms(res.GatewayCPUPerThumb))
	return msgs, nil
}

// thumbLone sends n images one at a time: each is uploaded, then sent
// after a random part of interval (so that its send falls anywhere in the
// worker's round), and its thumbnail awaited before the next.
func thumbLone(ctx context.Context, g *thumbGateway, w *thumbWatch, n int, interval time.Duration, rng *rand.Rand, pr io.Writer) (Dist, []string, error) {
	var lat []float64
	var ids []string
	for i := range n {
		u, err := g.upload(ctx, i%len(g.convs))
		if err != nil {
			return Dist{}, nil, fmt.Errorf("lone image upload: %w", err)
		}
		if !sleepCtx(ctx, time.Duration(rng.Int64N(int64(interval)))) {
			return Dist{}, nil, ctx.Err()
		}
		_, acked, err := g.send(ctx, u)
		if err != nil {
			return Dist{}, nil, fmt.Errorf("lone image send: %w", err)
		}
		if err := waitAnnounced(ctx, w, []string{u.id}, pr, "", acked); err != nil {
			return Dist{}, nil, fmt.Errorf("lone image: %w", err)
		}
		t, _ := w.announced(u.id)
		lat = append(lat, msOf(time.Unix(0, t).Sub(acked)))
		ids = append(ids, u.id)
	}
	d := newDist(lat)
	progressf(pr, "bench attachments: %d lone images, worker polling every %s: send -> announced p50 %s p99 %s",
		n, msText(msOf(interval)), ms(d.P50), ms(d.P99))
	return d, ids, nil
}

// openThumbnail downloads the thumbnail of m's attachment as the other
// member (reader) and opens it with the key derived from the file's.
func openThumbnail(ctx context.Context, g *thumbGateway, secret string, reader int64, m protocol.Message) (image.Config, int64, error) {
	a := m.Attachments[0]
	tok, err := gateway.IssueToken([]byte(secret), reader, time.Hour)
	if err != nil {
		return image.Config{}, 0, err
	}
	var at protocol.AttachmentURL
	if err := callJSON(ctx, g.hc, http.MethodGet, fmt.Sprintf("%s/v1/conversations/%d/attachments/%s?thumbnail=true&redirect=false",
		g.base, m.ConversationID, a.ID), tok, nil, http.StatusOK, &at); err != nil {
		return image.Config{}, 0, err
	}
	key, err := base64.RawURLEncoding.DecodeString(a.Key)
	if err != nil {
		return image.Config{}, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, at.URL, nil)
	if err != nil {
		return image.Config{}, 0, err
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		return image.Config{}, 0, err
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	if err := sealed.Open(&out, resp.Body, at.Size, sealed.ThumbnailKey(key)); err != nil {
		return image.Config{}, 0, fmt.Errorf("open the thumbnail of %s: %w", a.ID, err)
	}
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(out.Bytes()))
	if err != nil {
		return image.Config{}, 0, fmt.Errorf("the thumbnail of %s: %w", a.ID, err)
	}
	return cfg, int64(out.Len()), nil
}

// thumbnailsDone counts the uploads of ids whose thumbnail the store of
// record marks made.
func thumbnailsDone(ctx context.Context, pool *pgxpool.Pool, ids []string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM uploads WHERE id = ANY($1::uuid[]) AND thumbnail = 'done'`, ids).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the thumbnails made: %w", err)
	}
	return n, nil
}

// newThumbGateway is the thumbnail phases' view of the gateway at addr.
func newThumbGateway(addr string, hc *http.Client, convs []e2eConv, tokens []string, photo []byte) *thumbGateway {
	sum := sha256.Sum256(photo)
	return &thumbGateway{base: "http://" + addr, addr: addr, hc: hc, convs: convs, tokens: tokens, photo: photo,
		sum: hex.EncodeToString(sum[:])}
}
