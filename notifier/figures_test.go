package notifier_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/producer"
)

// BenchmarkNotifier measures the notifier at 1,000 msg/s, each iteration
// one whole run (docs/benchmarks.md has the command; the figures are
// docs/notifications.md's). 150 conversations of 7 members: the sender,
// 3 members connected (a live gateway's connection rows) and 3 offline.
// Messages are appended at 1,000/s (the gateway's send path is measured
// elsewhere) while an `inboxd notifier` process delivers to a receiver in
// this process: first 30 s with the receiver up (commit of a
// notification's first message -> webhook call, p50/p99), then 60 s with
// the receiver answering 503 (the notifier's memory, sampled every
// second), then up again until every offline member has every message.
func BenchmarkNotifier(b *testing.B) {
	var lat []time.Duration
	var rss []int64
	var sent int64
	for range b.N {
		l, r, n := notifyRun(b)
		lat, rss, sent = append(lat, l...), append(rss, r...), sent+n
	}
	slices.Sort(lat)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(sent)/float64(b.N), "messages/run")
	b.ReportMetric(float64(len(lat))/float64(b.N), "notifications/run")
	b.ReportMetric(float64(pct(lat, 0.5).Microseconds())/1000, "webhook-p50-ms")
	b.ReportMetric(float64(pct(lat, 0.99).Microseconds())/1000, "webhook-p99-ms")
	// The notifier's RSS with the receiver down, over the last run.
	b.ReportMetric(float64(rss[0]>>20), "rss-start-MiB")
	b.ReportMetric(float64(slices.Max(rss)>>20), "rss-max-MiB")
	b.ReportMetric(float64(rss[len(rss)-1]>>20), "rss-end-MiB")
}

// notifyRun is one run: the latencies of the notifications taken while
// the receiver was up, the notifier's RSS samples while it was down, and
// the messages sent.
func notifyRun(b *testing.B) ([]time.Duration, []int64, int64) {
	w := newFiguresWorld(b)
	ctx := context.Background()
	const convs, rate = 150, 1000
	cids := make([]int64, convs)
	for k := range convs {
		base := int64(7*k + 1)
		cids[k] = int64(k + 1)
		e := events.New(events.ConversationCreated, cids[k], base)
		e.Title, e.Members = "n", []int64{base + 1, base + 2, base + 3, base + 4, base + 5, base + 6}
		_, err := w.env.Producer.Append(ctx, e)
		require.NoError(b, err)
	}
	stopBeat := connectGateway(b, w.env.Pool, 7*convs)
	defer stopBeat()
	arrived := &sync.Map{} // id -> time of the first call
	var down atomic.Bool
	w.rcv.fail = func(int) (int, string) {
		if down.Load() {
			return http.StatusServiceUnavailable, ""
		}
		return 0, ""
	}
	w.rcv.onTake = func(id string) { arrived.LoadOrStore(id, time.Now()) }
	proc := startNotifier(b, w)
	stopWatch := watchLag(b, w.env.Pool)
	defer stopWatch()
	sent := load(b, w.env.Producer, cids, rate, 30*time.Second)
	phase1 := time.Now()
	down.Store(true)
	rss := sampleRSS(proc.Pid(), 60*time.Second, func() { sent += load(b, w.env.Producer, cids, rate, 60*time.Second) })
	down.Store(false)
	waitFor(b, 10*time.Minute, "every offline member has every message", func() bool {
		var n int64
		_ = w.env.Pool.QueryRow(ctx, `SELECT COALESCE(sum(count), 0) FROM notifications WHERE state = 'sent'`).Scan(&n)
		return n >= 3*sent
	})
	var dead int
	require.NoError(b, w.env.Pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE state = 'dead'`).Scan(&dead))
	require.Zero(b, dead)
	return latencies(b, w, arrived, phase1), rss, sent
}

// newFiguresWorld is the world of the figures: PostgreSQL, kfake, a
// fanout and the webhook receiver (no gateway: the conversations are
// appended to the log and the connections written as a gateway writes
// them).
func newFiguresWorld(tb testing.TB) *world {
	env := testenv.New(tb, testenv.Options{})
	env.StartFanout(tb)
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	tb.Cleanup(r.srv.Close)
	return &world{env: env, rcv: r}
}

// connectGateway writes a live gateway whose connections are those of
// the members 2, 3 and 4 of each conversation of 7 (users 1..users), and
// keeps its heartbeat until stop.
func connectGateway(tb testing.TB, pool *pgxpool.Pool, users int) (stop func()) {
	ctx := context.Background()
	gw := uuid.NewString()
	_, err := pool.Exec(ctx, `INSERT INTO presence_gateways (gateway_id, heartbeat_at) VALUES ($1, now())`, gw)
	require.NoError(tb, err)
	_, err = pool.Exec(ctx, `INSERT INTO connections (user_id, gateway_id)
		SELECT u, $1 FROM generate_series(1, $2::bigint) u WHERE (u - 1) % 7 IN (1, 2, 3)`, gw, users)
	require.NoError(tb, err)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Second):
				_, _ = pool.Exec(ctx, `UPDATE presence_gateways SET heartbeat_at = now() WHERE gateway_id = $1`, gw)
			}
		}
	}()
	return func() { close(done) }
}

// startNotifier starts an `inboxd notifier` process on w and waits until
// it has its offsets.
func startNotifier(tb testing.TB, w *world) *testenv.Proc {
	proc := testenv.Start(tb, []string{"DATABASE_URL=" + w.env.DatabaseURL, "INBOXD_KAFKA_BROKERS=" + strings.Join(w.env.Brokers, ","),
		"INBOXD_TOPIC=" + w.env.Topic, "INBOXD_NOTIFIER_GROUP=notifier-" + w.env.Topic,
		"INBOXD_WEBHOOK_URL=" + w.rcv.srv.URL, "INBOXD_WEBHOOK_SECRET=" + string(webhookSecret),
		"INBOXD_NOTIFY_PRESENCE_EXPIRY=5s", "INBOXD_LOG_LEVEL=warn",
		fmt.Sprintf("INBOXD_HTTP_ADDR=127.0.0.1:%d", testenv.FreePort(tb))}, "notifier")
	waitFor(tb, 60*time.Second, "the notifier's start", func() bool {
		var missing int
		_ = w.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM consumer_offsets c WHERE NOT EXISTS (
			SELECT 1 FROM notifier_offsets n WHERE n.topic = c.topic AND n."partition" = c."partition")`).Scan(&missing)
		return missing == 0
	})
	return proc
}

// watchLag logs the notifier's lag and pending notifications every 5 s
// until stop.
func watchLag(tb testing.TB, pool *pgxpool.Pool) (stop func()) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Second):
			}
			var lag, pending, due int64
			_ = pool.QueryRow(context.Background(), `SELECT COALESCE((SELECT sum(c.next_offset - n.next_offset) FROM consumer_offsets c
				JOIN notifier_offsets n USING (topic, "partition")), 0)::bigint,
				(SELECT count(*) FROM notifications WHERE state = 'pending'),
				(SELECT count(*) FROM notifications WHERE state = 'pending' AND due_at < now())`).Scan(&lag, &pending, &due)
			tb.Logf("notifier lag %d records, %d pending, %d due", lag, pending, due)
		}
	}()
	return func() { close(done) }
}

// load appends text messages at rate per second for d, to random
// conversations, from their first member; it returns how many.
func load(t testing.TB, p *producer.Producer, cids []int64, rate int, d time.Duration) int64 {
	var n atomic.Int64
	var failed atomic.Int64
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		<-tick.C
		k := i % len(cids)
		e := events.New(events.MessageSent, cids[k], int64(7*k+1))
		body := "message " + strconv.Itoa(i)
		e.MsgID, e.Body = uuid.NewString(), &body
		p.AppendAsync(context.Background(), e, func(_ producer.Position, err error) {
			if err != nil {
				failed.Add(1)
				return
			}
			n.Add(1)
		})
	}
	require.NoError(t, p.Flush(context.Background()))
	require.Zero(t, failed.Load())
	return n.Load()
}

// sampleRSS runs work and samples the resident memory of pid every second
// for d (and at least once after work).
func sampleRSS(pid int, d time.Duration, work func()) []int64 {
	var out []int64
	done := make(chan struct{})
	go func() { work(); close(done) }()
	read := func() {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return
		}
		for _, l := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				out = append(out, kb<<10)
			}
		}
	}
	read()
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(time.Second)
		read()
	}
	<-done
	read()
	return out
}

// latencies are the delays from each notification's first message commit
// to its call, for the notifications taken before until (the receiver
// went down then).
func latencies(t testing.TB, w *world, arrived *sync.Map, until time.Time) []time.Duration {
	rows, err := w.env.Pool.Query(context.Background(), `SELECT id::text, committed_at FROM notifications WHERE created_at < $1`, until)
	require.NoError(t, err)
	defer rows.Close()
	var out []time.Duration
	for rows.Next() {
		var id string
		var at time.Time
		require.NoError(t, rows.Scan(&id, &at))
		if v, ok := arrived.Load(id); ok && v.(time.Time).Before(until) {
			out = append(out, v.(time.Time).Sub(at))
		}
	}
	slices.Sort(out)
	return out
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[int(p*float64(len(d)-1))].Round(time.Millisecond)
}
