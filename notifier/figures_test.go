package notifier_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/producer"
)

var notifyFigures = flag.Bool("notifyfigures", false, "measure the notifier at 1,000 msg/s (issue 19, acceptance 3)")

// TestNotifyFigures measures issue 19's figures (not a check; run it by
// hand on a quiet machine):
//
//	go test ./notifier -run TestNotifyFigures -notifyfigures -v -timeout 20m
//
// 150 conversations of 7 members: the sender, 3 members connected (a live
// gateway's connection rows) and 3 offline. Messages are appended at
// 1,000/s (the gateway's send path is measured elsewhere) while an
// `inboxd notifier` process delivers to a receiver in this process: first
// 30 s with the receiver up (commit of a notification's first message ->
// webhook call, p50/p99), then 60 s with the receiver answering 503 (the
// notifier's memory, sampled every second), then up again until every
// offline member has every message.
func TestNotifyFigures(t *testing.T) {
	if !*notifyFigures {
		t.Skip("measure with -notifyfigures")
	}
	w := newWorld(t)
	ctx := context.Background()
	const convs, rate = 150, 1000
	cids := make([]int64, convs)
	for k := range convs {
		base := int64(7*k + 1)
		cids[k] = w.create(t, base, base+1, base+2, base+3, base+4, base+5, base+6)
	}
	gw := uuid.NewString()
	_, err := w.env.Pool.Exec(ctx, `INSERT INTO presence_gateways (gateway_id, heartbeat_at) VALUES ($1, now())`, gw)
	require.NoError(t, err)
	_, err = w.env.Pool.Exec(ctx, `INSERT INTO connections (user_id, gateway_id)
		SELECT u, $1 FROM generate_series(1, $2::bigint) u WHERE (u - 1) % 7 IN (1, 2, 3)`, gw, 7*convs)
	require.NoError(t, err)
	stopBeat := make(chan struct{})
	defer close(stopBeat)
	go func() {
		for {
			select {
			case <-stopBeat:
				return
			case <-time.After(time.Second):
				_, _ = w.env.Pool.Exec(ctx, `UPDATE presence_gateways SET heartbeat_at = now() WHERE gateway_id = $1`, gw)
			}
		}
	}()
	arrived := &sync.Map{} // id -> time of the first call
	var down atomic.Bool
	w.rcv.fail = func(int) (int, string) {
		if down.Load() {
			return http.StatusServiceUnavailable, ""
		}
		return 0, ""
	}
	w.rcv.onTake = func(id string) { arrived.LoadOrStore(id, time.Now()) }

	proc := testenv.Start(t, []string{"DATABASE_URL=" + w.env.DatabaseURL, "INBOXD_KAFKA_BROKERS=" + strings.Join(w.env.Brokers, ","),
		"INBOXD_TOPIC=" + w.env.Topic, "INBOXD_NOTIFIER_GROUP=notifier-" + w.env.Topic,
		"INBOXD_WEBHOOK_URL=" + w.rcv.srv.URL, "INBOXD_WEBHOOK_SECRET=" + string(webhookSecret),
		"INBOXD_NOTIFY_PRESENCE_EXPIRY=5s", "INBOXD_LOG_LEVEL=warn",
		fmt.Sprintf("INBOXD_HTTP_ADDR=127.0.0.1:%d", testenv.FreePort(t))}, "notifier")
	waitFor(t, 60*time.Second, "the notifier's start", func() bool {
		var missing int
		_ = w.env.Pool.QueryRow(ctx, `SELECT count(*) FROM consumer_offsets c WHERE NOT EXISTS (
			SELECT 1 FROM notifier_offsets n WHERE n.topic = c.topic AND n."partition" = c."partition")`).Scan(&missing)
		return missing == 0
	})

	stopWatch := make(chan struct{})
	defer close(stopWatch)
	go func() {
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(5 * time.Second):
			}
			var lag, pending, due int64
			_ = w.env.Pool.QueryRow(ctx, `SELECT COALESCE((SELECT sum(c.next_offset - n.next_offset) FROM consumer_offsets c
				JOIN notifier_offsets n USING (topic, "partition")), 0)::bigint,
				(SELECT count(*) FROM notifications WHERE state = 'pending'),
				(SELECT count(*) FROM notifications WHERE state = 'pending' AND due_at < now())`).Scan(&lag, &pending, &due)
			t.Logf("notifier lag %d records, %d pending, %d due", lag, pending, due)
		}
	}()
	sent := load(t, w.env.Producer, cids, rate, 30*time.Second)
	phase1 := time.Now()
	down.Store(true)
	rss := sampleRSS(proc.Pid(), 60*time.Second, func() { sent += load(t, w.env.Producer, cids, rate, 60*time.Second) })
	down.Store(false)
	waitFor(t, 10*time.Minute, "every offline member has every message", func() bool {
		var n int64
		_ = w.env.Pool.QueryRow(ctx, `SELECT COALESCE(sum(count), 0) FROM notifications WHERE state = 'sent'`).Scan(&n)
		return n >= 3*sent
	})
	var deadOrDup int
	require.NoError(t, w.env.Pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE state = 'dead'`).Scan(&deadOrDup))
	require.Zero(t, deadOrDup)
	lat := latencies(t, w, arrived, phase1)
	t.Logf("%d messages at %d/s to %d conversations of 7 (3 offline): commit of a notification's first message -> webhook call, "+
		"receiver up: %d notifications, p50 %v, p99 %v (the delay, --notify-delay, is 2 s); notifier RSS with the receiver down "+
		"for 60 s: start %d MiB, max %d MiB, end %d MiB", sent, rate, convs, len(lat), pct(lat, 0.5), pct(lat, 0.99),
		rss[0]>>20, slices.Max(rss)>>20, rss[len(rss)-1]>>20)
}

// load appends text messages at rate per second for d, to random
// conversations, from their first member; it returns how many.
func load(t *testing.T, p *producer.Producer, cids []int64, rate int, d time.Duration) int64 {
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
func latencies(t *testing.T, w *world, arrived *sync.Map, until time.Time) []time.Duration {
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
