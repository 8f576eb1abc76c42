package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/protocol"
)

// TestWSCatchUpLiveRestart: catch-up then live, across a restart. A client connecting
// with a cursor gets exactly the missing entries, then the live ones,
// contiguous and each once; reconnecting with its last cursor to a new
// gateway process on the same database (the old one shut down with 1012)
// loses and doubles nothing.
func TestWSCatchUpLiveRestart(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	// Small push batches: the catch-up spans several frames.
	wcfg := WSConfig{HeartbeatInterval: time.Second, PushBatch: 16}
	w1 := newWSGatewayOn(t, env, wsOpts{ws: wcfg})
	a, b := w1.user(t, 1), w1.user(t, 2)
	cid := a.create(t, "pair", 2)
	for i := 0; i < 40; i++ {
		a.send(t, cid, fmt.Sprintf("before %d", i))
	}
	epoch := b.sync(t, "").Epoch

	const from = 7
	c := dialWS(t, w1, b)
	s := c.stream(t, from, &epoch)
	// Live sends race with the catch-up: the hub subscription predates
	// the hello's read, so nothing falls between them.
	parallel(t, 30, 4, func(i int) error {
		_, err := a.sendE(cid, fmt.Sprintf("live %d", i))
		return err
	})
	head := b.head(t)
	s.waitCursor(t, head)
	want, _, _ := b.syncAll(t, from, 200)
	_, got := s.state()
	requireSameEntries(t, want, got)
	s.mu.Lock()
	require.NotNil(t, s.welcome)
	s.mu.Unlock()

	// Another user's client stays on gateway 1 to see how it ends.
	watcher := dialWS(t, w1, w1.user(t, 3)).stream(t, 0, nil)
	watcher.waitCursor(t, 0)

	// b goes away; messages go on; gateway 1 is replaced by gateway 2.
	_ = c.conn.Close()
	<-s.done
	last, got := s.state()
	for i := 0; i < 10; i++ {
		a.send(t, cid, fmt.Sprintf("while away %d", i))
	}
	w2 := newWSGatewayOn(t, env, wsOpts{ws: wcfg})
	w1.stopWS()
	require.Equal(t, protocol.CloseServiceRestart, watcher.waitClosed(t))

	a2, b2 := w2.user(t, 1), w2.user(t, 2)
	c2 := dialWS(t, w2, b2)
	s2 := c2.stream(t, last, &epoch)
	parallel(t, 20, 4, func(i int) error {
		_, err := a2.sendE(cid, fmt.Sprintf("after restart %d", i))
		return err
	})
	head = b2.head(t)
	s2.waitCursor(t, head)
	_, got2 := s2.state()
	want, _, _ = b2.syncAll(t, from, 200)
	requireSameEntries(t, want, append(got, got2...))
	w2.verify(t)
}

// TestWSTwoGateways is acceptance 2: two gateway processes (own hubs and
// LISTEN connections, own servers) on one database, clients spread over
// them (two users with a device on each), messages sent through both, over
// HTTP and over the sockets: every stream is complete and gap-free.
func TestWSTwoGateways(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	wcfg := WSConfig{HeartbeatInterval: time.Second}
	gws := [2]*wsgw{newWSGatewayOn(t, env, wsOpts{ws: wcfg}), newWSGatewayOn(t, env, wsOpts{ws: wcfg})}
	const n = 8
	users := func(gw int, id int64) *user { return gws[gw].user(t, id) }
	group := users(0, 1).create(t, "all", 2, 3, 4, 5, 6, 7, 8)
	p12 := users(1, 1).create(t, "one-two", 2)
	p34 := users(0, 3).create(t, "three-four", 4)

	type device struct {
		id int64
		gw int
		s  *wsStream
	}
	var devices []*device
	for id := int64(1); id <= n; id++ {
		gw := int(id % 2)
		devices = append(devices, &device{id: id, gw: gw})
		if id <= 2 {
			devices = append(devices, &device{id: id, gw: 1 - gw})
		}
	}
	for _, d := range devices {
		d.s = dialWS(t, gws[d.gw], users(d.gw, d.id)).stream(t, 0, nil)
	}

	var wg sync.WaitGroup
	// Over HTTP, through both gateways.
	wg.Add(1)
	go func() {
		defer wg.Done()
		parallel(t, 80, 6, func(k int) error {
			sender := int64(k%n) + 1
			cid := group
			switch {
			case k%4 == 1 && sender <= 2:
				cid = p12
			case k%4 == 1 && (sender == 3 || sender == 4):
				cid = p34
			}
			_, err := gws[k%2].user(t, sender).sendE(cid, fmt.Sprintf("http %d from %d", k, sender))
			return err
		})
	}()
	// Over the sockets: every device sends on its own connection.
	const perDevice = 5
	for _, d := range devices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perDevice; i++ {
				if err := d.s.c.writeJSONE(map[string]any{"type": protocol.FrameSend, "conversation_id": group,
					"msg_id": uuid.NewString(), "body": fmt.Sprintf("ws %d from %d@%d", i, d.id, d.gw)}); err != nil {
					t.Errorf("send: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, d := range devices {
		waitFor(t, 60*time.Second, "send acks", func() bool {
			d.s.mu.Lock()
			defer d.s.mu.Unlock()
			acks := 0
			for _, f := range d.s.others {
				require.Equal(t, protocol.FrameSendAck, f.Type, "%+v", f)
				acks++
			}
			return acks == perDevice
		})
	}
	for _, d := range devices {
		u := users(d.gw, d.id)
		head := u.head(t)
		d.s.waitCursor(t, head)
		want, _, _ := u.syncAll(t, 0, 200)
		_, got := d.s.state()
		requireSameEntries(t, want, got)
	}
	gws[0].verify(t)
}

// TestWSListenKilled is acceptance 3: the LISTEN connection is killed while
// messages flow and kept from coming back; heartbeats alone (each one a
// batched re-read of the head and what lies before it) bring every
// connected client every entry. Clients of a second endpoint whose
// heartbeats are too rare to help get them from the hub's wake-all when it
// is back. Then pushes resume.
func TestWSListenKilled(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	var hold atomic.Bool
	release := make(chan struct{})
	w := newWSGatewayOn(t, env, wsOpts{
		ws:    WSConfig{HeartbeatInterval: 300 * time.Millisecond},
		extra: map[string]WSConfig{"/v1/ws-rare": {HeartbeatInterval: 10 * time.Minute}},
		beforeConnect: func(ctx context.Context) {
			if hold.Load() {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
		},
	})
	const n = 5
	u1 := w.user(t, 1)
	cid := u1.create(t, "group", 2, 3, 4, 5)
	streams := map[int64]*wsStream{}
	rare := map[int64]*wsStream{}
	for id := int64(1); id <= n; id++ {
		u := w.user(t, id)
		streams[id] = dialWS(t, w, u).stream(t, u.head(t), nil)
		c, err := dialWSE(w.wsURLAt("/v1/ws-rare"), map[string][]string{"Authorization": {"Bearer " + u.token}}, nil)
		require.NoError(t, err)
		c.user = id
		rare[id] = c.stream(t, u.head(t), nil)
	}
	for id := int64(1); id <= n; id++ {
		streams[id].waitCursor(t, w.user(t, id).head(t))
		rare[id].waitCursor(t, w.user(t, id).head(t))
	}
	// Their reads after the hello are done: from now on only a heartbeat
	// or a hub wake-up can make them read.
	waitFor(t, 30*time.Second, "idle rare sessions", func() bool {
		for id := int64(1); id <= n; id++ {
			for _, ss := range sessionsOf(w.extra["/v1/ws-rare"], id) {
				if ss.Reading || ss.QueuedBytes != 0 {
					return false
				}
			}
		}
		return true
	})
	rareFrames := counterValue(wsMetric(w.extra["/v1/ws-rare"], "frames_written_total", protocol.FrameEntries))

	hold.Store(true)
	killed := 0
	for _, pool := range env.Pools { // one LISTEN connection per server
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'inboxd-gateway-listen' AND datname = current_database()`).Scan(&n))
		killed += n
	}
	require.Equal(t, len(env.Pools), killed)
	waitFor(t, 30*time.Second, "the hub to notice", func() bool { return !w.g.hub.Connected() })

	// Appended straight to the log: the gateway's send would wait for a
	// notification that cannot come.
	for i := 0; i < 20; i++ {
		appendMessage(t, env, int64(i%n)+1, cid, fmt.Sprintf("unheard %d", i))
	}
	env.WaitCaughtUp(t, 60*time.Second)
	for id, s := range streams {
		s.waitCursor(t, w.user(t, id).head(t))
	}
	require.False(t, w.g.hub.Connected(), "repaired by heartbeats, not by the hub's wake-all")
	// The rare-heartbeat sessions heard nothing meanwhile.
	require.Equal(t, rareFrames, counterValue(wsMetric(w.extra["/v1/ws-rare"], "frames_written_total", protocol.FrameEntries)))

	hold.Store(false)
	close(release)
	waitFor(t, 30*time.Second, "the hub to reconnect", func() bool { return w.g.hub.Connected() })
	for id, s := range rare { // woken by the wake-all, they re-read
		s.waitCursor(t, w.user(t, id).head(t))
	}
	for i := 0; i < 5; i++ {
		u1.send(t, cid, fmt.Sprintf("heard %d", i))
	}
	for id := int64(1); id <= n; id++ {
		u := w.user(t, id)
		want, _, _ := u.syncAll(t, 0, 200)
		for _, s := range []*wsStream{streams[id], rare[id]} {
			s.waitCursor(t, u.head(t))
			_, got := s.state()
			requireSameEntries(t, want[len(want)-len(got):], got)
		}
	}
}

// smallBuffers are socket options that make "the client stopped reading"
// visible after kilobytes rather than megabytes.
const smallBuffer = 8 << 10

type smallSndbufListener struct{ net.Listener }

func (l smallSndbufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(smallBuffer)
	}
	return c, err
}

// smallRcvbufDialer dials with a small receive buffer, set before connect
// so that the advertised window is small too.
var smallRcvbufDialer = &websocket.Dialer{
	HandshakeTimeout: 30 * time.Second,
	ReadBufferSize:   4096,
	NetDialContext: (&net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, smallBuffer)
		})
		if err != nil {
			return err
		}
		return serr
	}}).DialContext,
}

// rawReader reads a client's frames by hand and checks contiguity.
type rawReader struct {
	c      *wsClient
	cursor int64
	n      int
}

func (r *rawReader) read(t testing.TB) (protocol.ServerFrame, error) {
	t.Helper()
	f, err := r.c.nextE(60 * time.Second)
	if err != nil {
		return f, err
	}
	switch f.Type {
	case protocol.FrameEntries:
		for _, e := range f.Entries {
			require.Equal(t, r.cursor+1, e.InboxSeq)
			r.cursor = e.InboxSeq
			r.n++
		}
	case protocol.FrameTooLong:
		t.Fatalf("too_long on a live connection")
	}
	return f, nil
}

// readUntil reads until the cursor reaches head (true) or the connection
// closes (false, with the close code, -1 without a close frame).
func (r *rawReader) readUntil(t testing.TB, head int64) (bool, int) {
	t.Helper()
	for r.cursor < head {
		if _, err := r.read(t); err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return false, ce.Code
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("read timed out at %d before %d", r.cursor, head)
			}
			return false, -1
		}
	}
	return true, 0
}

func gaugeValue(g interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		panic(err)
	}
	return m.GetGauge().GetValue()
}

// TestWSSlowConsumer is acceptance 4: a client that stops reading does not
// slow the others, and the server holds a bounded amount for it (the rest
// waits in PostgreSQL); when it reads again it is caught up (or closed with
// 4008 and caught up after reconnecting). A client that reads more slowly
// than its inbox grows is closed with 4008; one that never reads again is
// closed with 4008 after WriteTimeout, or dropped if the close frame cannot
// get through within another WriteTimeout.
func TestWSSlowConsumer(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	wcfg := WSConfig{
		HeartbeatInterval: 5 * time.Second,
		QueueBytes:        16 << 10,
		PushBatch:         4,
		SlowTimeout:       300 * time.Millisecond,
		WriteTimeout:      time.Minute,
	}
	wt := wcfg
	wt.WriteTimeout = 300 * time.Millisecond
	w := newWSGatewayOn(t, env, wsOpts{ws: wcfg,
		wrapLn: func(l net.Listener) net.Listener { return smallSndbufListener{l} },
		extra:  map[string]WSConfig{"/v1/ws-wt": wt}})
	a, f, s, d := w.user(t, 1), w.user(t, 2), w.user(t, 3), w.user(t, 4)
	cid := a.create(t, "busy", 2, 3, 4)
	body := strings.Repeat("x", 3000)

	fast := dialWS(t, w, f).stream(t, f.head(t), nil)
	dialRaw := func(url string, u *user) *rawReader {
		c, err := dialWSE(url, map[string][]string{"Authorization": {"Bearer " + u.token}}, smallRcvbufDialer)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.conn.Close() })
		c.user = u.id
		r := &rawReader{c: c, cursor: u.head(t)}
		c.hello(t, r.cursor, nil)
		fr, err := r.read(t)
		require.NoError(t, err)
		require.Equal(t, protocol.FrameWelcome, fr.Type)
		return r
	}
	slow := dialRaw(w.wsURL(), s)
	dropped := dialRaw(w.wsURLAt("/v1/ws-wt"), d)
	sess := sessionsOf(w.ws, s.id)
	require.Len(t, sess, 1)

	// What the server holds for the stopped client, sampled while the
	// messages flow.
	var maxQueued atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			q := int64(sessionInfo(w.ws, sess[0].ID).QueuedBytes)
			if q > maxQueued.Load() {
				maxQueued.Store(q)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()

	// Phase 1: both raw clients stop reading; 150 messages of 3 KB flow.
	parallel(t, 150, 6, func(i int) error {
		_, err := a.sendE(cid, body)
		return err
	})
	fast.waitCursor(t, f.head(t)) // the others are not held up
	waitFor(t, 60*time.Second, "a stalled write", func() bool { return stalledWrites(w.ws, 0) >= 1 })
	waitFor(t, 60*time.Second, "the write timeout", func() bool {
		return counterValue(wsMetric(w.extra["/v1/ws-wt"], "slow_closes_total", "write_timeout")) == 1
	})
	close(stopSampling)
	<-sampled
	bound := int64(wcfg.QueueBytes/2 + wcfg.PushBatch*(len(body)+1024) + 4096)
	t.Logf("most queued for the stopped client: %d bytes (bound %d), %d entries behind", maxQueued.Load(), bound, s.head(t)-slow.cursor)
	require.LessOrEqual(t, maxQueued.Load(), bound)

	// The dropped client finds a clean prefix and then the end: the 4008
	// when it reads within the close frame's own WriteTimeout (here only
	// 300ms, see TestWSStoppedReaderGets4008 for it), else no close frame.
	ok, code := dropped.readUntil(t, d.head(t))
	require.False(t, ok)
	require.Contains(t, []int{protocol.CloseTooSlow, -1, websocket.CloseAbnormalClosure}, code)

	// The stopped client reads again: caught up, or closed with 4008
	// and caught up through a reconnect with its cursor.
	head := s.head(t)
	if ok, code := slow.readUntil(t, head); ok {
		t.Log("phase 1: the stopped client was caught up")
	} else {
		require.Equal(t, protocol.CloseTooSlow, code)
		t.Log("phase 1: the stopped client was closed with 4008")
		again := dialWS(t, w, s)
		again.stream(t, slow.cursor, nil).waitCursor(t, head)
		_ = again.conn.Close()
	}
	_ = slow.c.conn.Close()
	waitFor(t, 30*time.Second, "the slow client's sessions to end", func() bool { return len(sessionsOf(w.ws, s.id)) == 0 })

	// Phase 2: a client reads, but always well behind the head: it lags,
	// and once it has lagged for SlowTimeout it is closed with 4008.
	lagCloses := counterValue(wsMetric(w.ws, "slow_closes_total", "lag"))
	slow = dialRaw(w.wsURL(), s)
	sess = sessionsOf(w.ws, s.id)
	require.Len(t, sess, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var sent atomic.Int64
	sender := make(chan error, 1)
	go func() {
		for i := 0; i < 5000 && ctx.Err() == nil; i++ {
			if _, err := a.sendE(cid, body); err != nil {
				sender <- err
				return
			}
			sent.Add(1)
		}
		sender <- nil
	}()
	dbHead := func() int64 {
		var h int64
		require.NoError(t, env.UserPool(s.id).QueryRow(context.Background(), `SELECT inbox_seq FROM users WHERE id = $1`, s.id).Scan(&h))
		return h
	}
	for {
		since := sessionInfo(w.ws, sess[0].ID).LaggingSince
		if !since.IsZero() {
			if time.Since(since) > wcfg.SlowTimeout {
				break
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if dbHead()-slow.cursor < 40 {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		_, err := slow.read(t)
		require.NoError(t, err, "closed before lagging")
	}
	ok, code = slow.readUntil(t, 1<<62)
	require.False(t, ok)
	require.Equal(t, protocol.CloseTooSlow, code)
	cancel()
	require.NoError(t, <-sender)
	require.Equal(t, lagCloses+1, counterValue(wsMetric(w.ws, "slow_closes_total", "lag")))
	t.Logf("phase 2: closed with 4008 after %d messages, %d entries read", sent.Load(), slow.n)

	again := dialWS(t, w, s).stream(t, slow.cursor, nil)
	again.waitCursor(t, s.head(t))
	fast.waitCursor(t, f.head(t))
	waitFor(t, 30*time.Second, "lag to clear", func() bool {
		return gaugeValue(wsMetric(w.ws, "lagging_sessions")) == 0
	})
}

// TestWSPushesAnnouncedEntries: live entries are pushed from the entries
// the notifications announce (no push query), with their messages from the
// cache (sent here) or read (appended by someone else), and the stream is
// the same as the HTTP sync of the range, through a membership change.
func TestWSPushesAnnouncedEntries(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{})
	a, b := w.user(t, 1), w.user(t, 2)
	cid := a.create(t, "announced", 2)
	from := b.head(t)
	s := dialWS(t, w, b).stream(t, from, nil)
	s.waitCursor(t, from)
	before := counterValue(wsMetric(w.ws, "announced_pushes_total"))
	for i := range 10 {
		a.send(t, cid, fmt.Sprintf("sent here %d", i))
	}
	for i := range 5 {
		appendMessage(t, w.env, 1, cid, fmt.Sprintf("appended elsewhere %d", i))
	}
	r := a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", cid), `{"user_id": 3}`)
	require.Contains(t, []int{201, 202}, r.status, "%s", r)
	for i := range 5 {
		a.send(t, cid, fmt.Sprintf("after the join %d", i))
	}
	w.env.WaitCaughtUp(t, 30*time.Second)
	head := b.head(t)
	s.waitCursor(t, head)
	want, _, _ := b.syncAll(t, from, 200)
	_, got := s.state()
	requireSameEntries(t, want, got)
	for i := range want {
		require.Equal(t, string(want[i].Message.Body), string(got[i].Message.Body), "entry %d", i)
	}
	require.Greater(t, counterValue(wsMetric(w.ws, "announced_pushes_total")), before, "some pushes came from the announced entries")
}

// TestWSPushOfASendFromTheCache: a message sent through this gateway is
// pushed to the members' sessions from the message cache, with no read:
// the sender puts it there as the notification of its projection is
// dispatched, before that notification wakes the sessions (from the
// sender's own goroutine it often came after the pushes, which then read
// it from PostgreSQL). And the push window, here longer than the test,
// holds only reads: the hello's read waits in it until announced entries
// arrive for the session, which end it.
func TestWSPushOfASendFromTheCache(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{PushWindow: time.Hour})
	a, b := w.user(t, 1), w.user(t, 2)
	cid := a.create(t, "cached", 2)
	s := dialWS(t, w, b).stream(t, b.head(t), nil)
	// The hello's own read may run after a first send committed and
	// before its notification cached it: a warm-up send, pushed, ends
	// that read before the misses are counted.
	a.send(t, cid, "warm-up")
	from := b.head(t)
	s.waitCursor(t, from)
	misses := w.g.metrics.cache.WithLabelValues("messages", "miss")
	before := counterValue(misses)
	stage := func(name string) float64 {
		return histCount(w.g.metrics.sendStages.WithLabelValues(name).(prometheus.Histogram))
	}
	checks, appends, projections := stage("check"), stage("append"), stage("projection")
	for i := range 20 {
		a.send(t, cid, fmt.Sprintf("cached %d", i))
	}
	head := b.head(t)
	s.waitCursor(t, head)
	want, _, _ := b.syncAll(t, from, 200)
	_, all := s.state()
	var got []protocol.Entry
	for _, e := range all {
		if e.InboxSeq > from {
			got = append(got, e)
		}
	}
	requireSameEntries(t, want, got)
	require.Len(t, got, 20)
	if w.env.Sharded() && (w.env.UserPool(1) != w.env.ConvPool(cid) || w.env.UserPool(2) != w.env.ConvPool(cid)) {
		// A message is cached when the gateway dispatches its send's
		// acknowledgement, from the notifications of the server that
		// applied the sender's own entry; a member on another server is
		// woken by that server's notifications, on another connection,
		// which can be dispatched first (and a member on the
		// conversation's server is woken before the acknowledgement of a
		// sender elsewhere, a Kafka hop later): its push may read the
		// message from PostgreSQL. A miss costs a read, not an entry.
		t.Logf("the users and the conversation on two servers: %v cache misses of pushes, not asserted", counterValue(misses)-before)
	} else {
		require.Equal(t, before, counterValue(misses), "no push read a message sent here from PostgreSQL")
	}
	// Every send went through each stage once (a.send wants 201: projected).
	require.Equal(t, checks+20, stage("check"))
	require.Equal(t, appends+20, stage("append"))
	require.Equal(t, projections+20, stage("projection"))
}
