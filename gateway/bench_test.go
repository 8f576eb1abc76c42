package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/protocol"
)

// Benchmarks: go test ./gateway -run XXX -bench . -benchtime 200x

// BenchmarkSyncPage measures one page of 50 entries with their messages,
// through HTTP.
func BenchmarkSyncPage(b *testing.B) {
	tg := newGateway(b, nil)
	a, r := tg.user(b, 1), tg.user(b, 2)
	cid := a.create(b, "bench", 2)
	parallel(b, 300, 8, func(i int) error {
		_, err := a.sendE(cid, "message "+strconv.Itoa(i))
		return err
	})
	_, head, _ := r.syncAll(b, 0, 200)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		after := int64(i*50) % (head - 50)
		s := r.sync(b, "limit=50&after="+strconv.FormatInt(after, 10))
		if len(s.Entries) != 50 {
			b.Fatalf("%d entries", len(s.Entries))
		}
	}
}

// BenchmarkSync304 measures the "nothing new" answer to a client that sends
// its ETag.
func BenchmarkSync304(b *testing.B) {
	tg := newGateway(b, nil)
	a := tg.user(b, 1)
	a.create(b, "bench")
	r := a.do(b, "GET", "/v1/sync", nil)
	var s protocol.SyncAnswer
	r.decode(b, &s)
	etag := r.header.Get("ETag")
	q := "/v1/sync?after=" + strconv.FormatInt(s.Head, 10)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := a.do(b, "GET", q, nil, "If-None-Match", etag); r.status != http.StatusNotModified {
			b.Fatal(r)
		}
	}
}

// BenchmarkLongPollWake measures, per op, a held long-poll from the append
// of a message (acknowledged by Kafka) to the poll's answer: fanout's
// consume and commit, the NOTIFY, the wake-up, the re-read and the answer.
// It reports the median and the 90th percentile.
func BenchmarkLongPollWake(b *testing.B) {
	tg := newGateway(b, nil)
	a, r := tg.user(b, 1), tg.user(b, 2)
	cid := a.create(b, "bench", 2)
	_, head, _ := r.syncAll(b, 0, 50)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		done := make(chan time.Time, 1)
		go func() {
			res, err := r.doE("GET", "/v1/sync?wait=30&after="+strconv.FormatInt(head, 10), nil)
			if err != nil || res.status != http.StatusOK {
				panic(fmt.Sprint(err, res))
			}
			done <- time.Now()
		}()
		for tg.g.HeldPolls() == 0 {
			time.Sleep(100 * time.Microsecond)
		}
		e := events.New(events.MessageSent, cid, 1)
		e.MsgID, e.Body = uuid.NewString(), events.Ptr("wake")
		if _, err := tg.env.Producer.Append(context.Background(), e); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		lat = append(lat, (<-done).Sub(t0))
		head++
		for tg.g.HeldPolls() != 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "ms-p90")
}

// BenchmarkHeldLongPolls holds 10,000 long-polls (of 10,000 users) in one
// gateway, without sockets, and reports what each costs while held; then
// the clients go away and every handler must return.
func BenchmarkHeldLongPolls(b *testing.B) {
	const polls = 10000
	tg := buildGateway(b, func(c *Config) { c.MaxHeldPolls = polls })
	startListen(b, tg.g)
	h := tg.g.Handler()
	tokens := make([]string, polls)
	for i := range tokens {
		tokens[i] = tg.user(b, int64(1+i)).token
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		runtime.GC()
		var before, during runtime.MemStats
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := 0; i < polls; i++ {
			req := httptest.NewRequest("GET", "/v1/sync?wait=30", nil).WithContext(ctx)
			req.Header.Set("Authorization", "Bearer "+tokens[i])
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.ServeHTTP(httptest.NewRecorder(), req)
			}()
		}
		for tg.g.HeldPolls() < polls {
			time.Sleep(time.Millisecond)
		}
		runtime.GC()
		runtime.ReadMemStats(&during)
		b.ReportMetric(float64(during.HeapAlloc-before.HeapAlloc)/polls, "heap-B/poll")
		b.ReportMetric(float64(during.StackInuse-before.StackInuse)/polls, "stack-B/poll")
		b.ReportMetric(float64(runtime.NumGoroutine()-g0)/polls, "goroutines/poll")
		b.ReportMetric(float64(osThreads(b)), "threads")
		cancel()
		wg.Wait()
		if tg.g.HeldPolls() != 0 || tg.g.hub.Waiters() != 0 {
			b.Fatalf("%d polls, %d waiters left", tg.g.HeldPolls(), tg.g.hub.Waiters())
		}
	}
}
