package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/s3server"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/protocol"
	"github.com/inboxd/inboxd/protocol/sealed"
)

// AttachmentsConfig sizes the attachments figure.
type AttachmentsConfig struct {
	Files       int   // files uploaded and sent, and plain PUTs of the reference (default 200)
	Size        int64 // bytes of each file (default 1 MiB)
	Concurrency int   // uploads in flight at once (default 4)
	Partitions  int   // topic partitions (default 4)

	// The thumbnails: Images photos sent Concurrency at once, then Lone
	// photos one at a time on the gateway as configured (its worker polls
	// every gateway.DefaultThumbnailInterval) and Lone more on a second
	// gateway polling every ShortInterval. Each photo is a JPEG of
	// ImageWidth x ImageHeight pixels, of the quality that comes closest
	// to ImageSize bytes. Defaults: 100 images, 10 lone, 50 ms, 2000 x
	// 1500 pixels, 1 MiB. Images is at most Concurrency times the
	// gateway's open uploads per user (gateway.DefaultUploadQuotaFiles):
	// the burst's uploads are all made before the first send.
	Images                  int
	Lone                    int
	ShortInterval           time.Duration
	ImageWidth, ImageHeight int
	ImageSize               int64
}

func (c *AttachmentsConfig) setDefaults() {
	setDefault(&c.Files, 200)
	if c.Size == 0 {
		c.Size = 1 << 20
	}
	setDefault(&c.Concurrency, 4)
	setDefault(&c.Partitions, 4)
	setDefault(&c.Images, 100)
	setDefault(&c.Lone, 10)
	if c.ShortInterval == 0 {
		c.ShortInterval = 50 * time.Millisecond
	}
	setDefault(&c.ImageWidth, 2000)
	setDefault(&c.ImageHeight, 1500)
	if c.ImageSize == 0 {
		c.ImageSize = 1 << 20
	}
}

func (c *AttachmentsConfig) validate() error {
	switch {
	case c.Images > c.Concurrency*gateway.DefaultUploadQuotaFiles:
		return fmt.Errorf("attachments: %d images are more open uploads than %d senders may hold (%d each)",
			c.Images, c.Concurrency, gateway.DefaultUploadQuotaFiles)
	case c.Images < 1 || c.Lone < 1 || c.ShortInterval < 0 || c.ImageWidth < 1 || c.ImageHeight < 1:
		return errors.New("attachments: images, lone, short interval and image sizes must be positive")
	}
	return nil
}

// AttachmentsResult is the attachments figure: a file's upload and send
// end to end (ask for the upload, seal, PUT to the store, send with it
// attached, answered once projected) next to a plain PUT of the same
// bytes to the same store, and what the gateway spent on each upload.
type AttachmentsResult struct {
	Files       int   `json:"files"`
	Size        int64 `json:"size"`
	Concurrency int   `json:"concurrency"`
	// EndToEnd is upload + send per file; PlainPut a presigned PUT of the
	// same sealed bytes, the same way, with no gateway call around it.
	EndToEnd Dist `json:"end_to_end"`
	PlainPut Dist `json:"plain_put"`
	// Stages of the end to end: the upload's creation, the sealed PUT, the
	// send (its check looks the object up in the store).
	Create Dist `json:"create"`
	Put    Dist `json:"put"`
	Send   Dist `json:"send"`
	// GatewayCPUPerUpload is the gateway's CPU seconds over the end-to-end
	// phase per file, in microseconds; GatewayRSSGrowth how much its
	// resident set grew over that phase, and GatewayRSS its size after it.
	GatewayCPUPerUpload float64 `json:"gateway_cpu_us_per_upload"`
	GatewayRSSGrowth    int64   `json:"gateway_rss_growth_bytes"`
	GatewayRSS          int64   `json:"gateway_rss_bytes"`
	Downloaded          bool    `json:"downloaded"`
	// Thumbnails is the thumbnail worker's figure, on photos.
	Thumbnails ThumbnailsResult `json:"thumbnails"`
}

// Rows implements Result.
func (r AttachmentsResult) Rows() []Row {
	size := fmt.Sprintf("%.1f MiB", float64(r.Size)/(1<<20))
	rows := []Row{
		{Figure: fmt.Sprintf("upload + send of a %s file, end to end (ask, seal, PUT to SeaweedFS, send answered once projected; %d files, %d at once), p50 / p99",
			size, r.Files, r.Concurrency),
			Value:     ms(r.EndToEnd.P50) + " / " + ms(r.EndToEnd.P99),
			Reference: "a plain presigned PUT of the same sealed bytes to the same store: " + ms(r.PlainPut.P50) + " / " + ms(r.PlainPut.P99),
			Ratio:     "p50 " + ratio(r.EndToEnd.P50, r.PlainPut.P50) + ", p99 " + ratio(r.EndToEnd.P99, r.PlainPut.P99)},
		{Figure: "where an upload's time goes, p50: the upload's creation / the sealed PUT / the send with the file attached",
			Value:     ms(r.Create.P50) + " / " + ms(r.Put.P50) + " / " + ms(r.Send.P50),
			Reference: "end to end p50: " + ms(r.EndToEnd.P50),
			Ratio:     "PUT share " + ratio(r.Put.P50, r.EndToEnd.P50)},
		{Figure: "the gateway's CPU per upload + send of a file (it signs; the bytes go to the store)",
			Value:     fmt.Sprintf("%.0f us", r.GatewayCPUPerUpload),
			Reference: fmt.Sprintf("the file: %s; its sealing and PUT run in the client", size),
			Ratio:     "n/a"},
		{Figure: "the gateway's resident memory: growth over the uploads / size after them",
			Value:     fmt.Sprintf("%.1f MiB / %.1f MiB", float64(r.GatewayRSSGrowth)/(1<<20), float64(r.GatewayRSS)/(1<<20)),
			Reference: fmt.Sprintf("the files uploaded: %d x %s = %.0f MiB", r.Files, size, float64(r.Files)*float64(r.Size)/(1<<20)),
			Ratio:     ratio(float64(r.GatewayRSSGrowth), float64(r.Files)*float64(r.Size))},
	}
	return append(rows, r.Thumbnails.rows(r.Concurrency)...)
}

// Attachments runs the attachments figure: a SeaweedFS store, a pipeline
// (fanout and kfake here) and a gateway child process with the store;
// first the reference PUTs, then the uploads and sends, then a download
// of one file, opened and compared; then the thumbnails of photos, sent
// in a burst and one at a time, with a second gateway for the short
// interval.
func Attachments(ctx context.Context, env *Env, cfg AttachmentsConfig) (AttachmentsResult, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return AttachmentsResult{}, err
	}
	pr := env.Progress
	res := AttachmentsResult{Files: cfg.Files, Size: cfg.Size, Concurrency: cfg.Concurrency}
	progressf(pr, "bench attachments: starting SeaweedFS (scripts/seaweedfs.sh builds it on first use)")
	s3, err := s3server.Start()
	if err != nil {
		return res, err
	}
	defer s3.Stop()
	s3cfg := attachments.S3Config{Endpoint: s3.Endpoint, Bucket: "bench", AccessKey: s3.AccessKey, SecretKey: s3.SecretKey}
	store, err := attachments.NewS3(ctx, s3cfg)
	if err != nil {
		return res, err
	}
	defer store.Close()

	pl, err := env.newPipeline(ctx, "attachments", cfg.Partitions)
	if err != nil {
		return res, err
	}
	defer pl.Close()
	_, stopFanout, err := pl.startFanout(ctx, env, fanout.Config{})
	if err != nil {
		return res, err
	}
	defer stopFanout()
	// One conversation per uploader, of two members: the uploader and a reader.
	convs, err := appendConversations(ctx, pl.prod, cfg.Concurrency, 2)
	if err != nil {
		return res, err
	}
	if err := testenv.WaitCaughtUp(ctx, pl.pool, pl.prod, 2*time.Minute); err != nil {
		return res, err
	}
	secret := randomSecret()
	gw, ready, err := startServe(ctx, env, "gateway", serveConfig{Mode: "gateway", DatabaseURL: pl.url, Brokers: pl.brokers,
		Partitions: cfg.Partitions, Secret: secret, S3: s3cfg})
	if err != nil {
		return res, err
	}
	defer gw.kill()
	base := "http://" + ready.Addr
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * cfg.Concurrency}}
	defer hc.CloseIdleConnections()

	file := make([]byte, cfg.Size)
	_, _ = rand.Read(file)
	sum := sha256.Sum256(file)

	// The reference: presigned PUTs of the sealed bytes, as the uploads do
	// them, with no gateway call around.
	var sealedRef bytes.Buffer
	key := make([]byte, sealed.KeySize)
	_, _ = rand.Read(key)
	if err := sealed.Seal(&sealedRef, bytes.NewReader(file), cfg.Size, key); err != nil {
		return res, err
	}
	plainPut := func(name string) func(i, _ int) error {
		return func(i, _ int) error {
			u, h, err := store.PresignPut(ctx, fmt.Sprintf("%s-%d", name, i), time.Minute)
			if err != nil {
				return err
			}
			return put(ctx, hc, http.MethodPut, u, h, bytes.NewReader(sealedRef.Bytes()), int64(sealedRef.Len()))
		}
	}
	// A warm-up first: the store's first writes allocate its volumes.
	if _, err := parallelTimes(ctx, 4*cfg.Concurrency, cfg.Concurrency, plainPut("warm")); err != nil {
		return res, fmt.Errorf("warm-up PUTs: %w", err)
	}
	progressf(pr, "bench attachments: %d plain PUTs of %d sealed bytes, %d at once", cfg.Files, sealedRef.Len(), cfg.Concurrency)
	plain, err := parallelTimes(ctx, cfg.Files, cfg.Concurrency, plainPut("ref"))
	if err != nil {
		return res, fmt.Errorf("plain PUTs: %w", err)
	}
	res.PlainPut = newDist(plain)

	progressf(pr, "bench attachments: %d uploads + sends of %d bytes, %d at once", cfg.Files, cfg.Size, cfg.Concurrency)
	tokens := make([]string, cfg.Concurrency)
	for i, c := range convs {
		if tokens[i], err = gateway.IssueToken([]byte(secret), c.Members[0], time.Hour); err != nil {
			return res, err
		}
	}
	rss0, _ := rssBytes(ready.Pid)
	meter := newCPUMeter(map[string]func() []int{"gateway": func() []int { return []int{ready.Pid} }})
	var mu sync.Mutex
	var creates, puts, sends []float64
	var lastMsg protocol.Message
	e2e, err := parallelTimes(ctx, cfg.Files, cfg.Concurrency, func(_, w int) error {
		cid, tok := convs[w].ID, tokens[w]
		t0 := time.Now()
		var up protocol.Upload
		if err := callJSON(ctx, hc, http.MethodPost, fmt.Sprintf("%s/v1/conversations/%d/uploads", base, cid), tok,
			// Random bytes, not an image: the thumbnail worker leaves
			// them alone, and the CPU measured is the upload's.
			protocol.UploadRequest{Name: "file.bin", ContentType: "application/octet-stream", Size: cfg.Size, SHA256: hex.EncodeToString(sum[:])},
			http.StatusCreated, &up); err != nil {
			return err
		}
		t1 := time.Now()
		k, err := base64.RawURLEncoding.DecodeString(up.Key)
		if err != nil {
			return err
		}
		rd, pw := io.Pipe()
		go func() { pw.CloseWithError(sealed.Seal(pw, bytes.NewReader(file), cfg.Size, k)) }()
		h := http.Header{}
		for name, v := range up.Headers {
			h.Set(name, v)
		}
		if err := put(ctx, hc, up.Method, up.URL, h, rd, up.SealedSize); err != nil {
			rd.CloseWithError(err)
			return err
		}
		t2 := time.Now()
		var m protocol.Message
		if err := callJSON(ctx, hc, http.MethodPost, fmt.Sprintf("%s/v1/conversations/%d/messages", base, cid), tok,
			protocol.SendMessage{MsgID: uuid.NewString(), Attachments: []string{up.ID}}, http.StatusCreated, &m); err != nil {
			return err
		}
		t3 := time.Now()
		if len(m.Attachments) != 1 {
			return fmt.Errorf("message %d/%d has %d attachments, want 1", m.ConversationID, m.Seq, len(m.Attachments))
		}
		mu.Lock()
		creates, puts, sends = append(creates, msOf(t1.Sub(t0))), append(puts, msOf(t2.Sub(t1))), append(sends, msOf(t3.Sub(t2)))
		lastMsg = m
		mu.Unlock()
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("uploads and sends: %w", err)
	}
	cpu := meter.stop()
	rss1, _ := rssBytes(ready.Pid)
	res.EndToEnd, res.Create, res.Put, res.Send = newDist(e2e), newDist(creates), newDist(puts), newDist(sends)
	if len(cpu) == 1 {
		res.GatewayCPUPerUpload = cpu[0].Seconds / float64(cfg.Files) * 1e6
	}
	res.GatewayRSS, res.GatewayRSSGrowth = rss1, max(0, rss1-rss0)

	// The other member of the last file's conversation downloads it and
	// opens it.
	a, owner := lastMsg.Attachments[0], lastMsg.ConversationID
	var reader int64
	for _, c := range convs {
		if c.ID == owner {
			reader = c.Members[1]
		}
	}
	tok, err := gateway.IssueToken([]byte(secret), reader, time.Hour)
	if err != nil {
		return res, err
	}
	var at protocol.AttachmentURL
	if err := callJSON(ctx, hc, http.MethodGet, fmt.Sprintf("%s/v1/conversations/%d/attachments/%s?redirect=false", base, owner, a.ID),
		tok, nil, http.StatusOK, &at); err != nil {
		return res, err
	}
	got, err := fetchOpen(ctx, hc, at.URL, a)
	if err != nil {
		return res, err
	}
	if !bytes.Equal(got, file) {
		return res, fmt.Errorf("the downloaded file differs from the uploaded one")
	}
	res.Downloaded = true
	progressf(pr, "bench attachments: end to end p50 %s p99 %s (plain PUT %s / %s); gateway %.0f us CPU per upload, RSS +%.1f MiB",
		ms(res.EndToEnd.P50), ms(res.EndToEnd.P99), ms(res.PlainPut.P50), ms(res.PlainPut.P99), res.GatewayCPUPerUpload,
		float64(res.GatewayRSSGrowth)/(1<<20))

	err = attachmentThumbnails(ctx, env, cfg, pl, convs, tokens, secret, hc, gw, ready, serveConfig{Mode: "gateway", DatabaseURL: pl.url,
		Brokers: pl.brokers, Partitions: cfg.Partitions, Secret: secret, S3: s3cfg, ThumbnailInterval: cfg.ShortInterval}, &res.Thumbnails)
	return res, err
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// parallelTimes runs job n times on workers goroutines (job gets its
// index and its worker) and returns each run's time in milliseconds.
func parallelTimes(ctx context.Context, n, workers int, job func(i, w int) error) ([]float64, error) {
	var mu sync.Mutex
	var times []float64
	var firstErr error
	next := make(chan int)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t0 := time.Now()
				err := job(i, w)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				times = append(times, msOf(time.Since(t0)))
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return times, firstErr
}

// put sends body (size bytes) with method to url with h.
func put(ctx context.Context, hc *http.Client, method, url string, h http.Header, body io.Reader, size int64) error {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	req.ContentLength = size
	for k, v := range h {
		req.Header[k] = v
	}
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s", method, url, res.Status)
	}
	return nil
}

// callJSON is one API call with a bearer token, expecting want.
func callJSON(ctx context.Context, hc *http.Client, method, url, tok string, in any, want int, out any) error {
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, url, res.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}

// fetchOpen GETs a sealed file and opens it with a's key.
func fetchOpen(ctx context.Context, hc *http.Client, url string, a protocol.Attachment) ([]byte, error) {
	key, err := base64.RawURLEncoding.DecodeString(a.Key)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var out bytes.Buffer
	if err := sealed.Open(&out, res.Body, a.Size, key); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
