package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/projector"
)

// ShardsConfig configures Shards. Zero fields take the defaults in
// brackets.
type ShardsConfig struct {
	Messages      int // [40000]
	Members       int // [7] per conversation
	Conversations int // [1000]
	Partitions    int // [4]
	// Rates of the paced phases, messages/s [100, 1000], each PacedFor
	// [10s]: the latency of an entry under load, not idle.
	Rates    []int
	PacedFor time.Duration
}

func (c *ShardsConfig) setDefaults() {
	setDefault(&c.Messages, 40000)
	setDefault(&c.Members, 7)
	setDefault(&c.Conversations, 1000)
	setDefault(&c.Partitions, 4)
	if len(c.Rates) == 0 {
		c.Rates = []int{100, 1000}
	}
	if c.PacedFor == 0 {
		c.PacedFor = 10 * time.Second
	}
}

// ShardsPaced is one paced phase's latencies, in ms: append -> NOTIFY of
// the entry's commit on the user's server (what wakes a push), and append
// -> the push on the user's WebSocket.
type ShardsPaced struct {
	Rate         int     `json:"rate"`
	OneP50Ms     float64 `json:"one_server_p50_ms"`
	OneP99Ms     float64 `json:"one_server_p99_ms"`
	LocalP50Ms   float64 `json:"two_servers_local_p50_ms"`
	LocalP99Ms   float64 `json:"two_servers_local_p99_ms"`
	CrossedP50Ms float64 `json:"two_servers_crossed_p50_ms"`
	CrossedP99Ms float64 `json:"two_servers_crossed_p99_ms"`
	// The same messages' push on the member's WebSocket (an in-process
	// gateway reading every server), append -> the entries frame.
	OnePushP50Ms     float64 `json:"one_server_push_p50_ms"`
	OnePushP99Ms     float64 `json:"one_server_push_p99_ms"`
	LocalPushP50Ms   float64 `json:"two_servers_local_push_p50_ms"`
	LocalPushP99Ms   float64 `json:"two_servers_local_push_p99_ms"`
	CrossedPushP50Ms float64 `json:"two_servers_crossed_push_p50_ms"`
	CrossedPushP99Ms float64 `json:"two_servers_crossed_push_p99_ms"`
}

// ShardsResult is the outcome of Shards.
type ShardsResult struct {
	Messages        int           `json:"messages"`
	Members         int           `json:"members"`
	OneRowsPerSec   float64       `json:"one_server_inbox_rows_per_sec"`
	TwoRowsPerSec   float64       `json:"two_servers_inbox_rows_per_sec"`
	CrossedShare    float64       `json:"crossed_share"`
	OneP50Ms        float64       `json:"one_server_idle_p50_ms"`
	OneP99Ms        float64       `json:"one_server_idle_p99_ms"`
	LocalP50Ms      float64       `json:"two_servers_local_idle_p50_ms"`
	LocalP99Ms      float64       `json:"two_servers_local_idle_p99_ms"`
	CrossedP50Ms    float64       `json:"two_servers_crossed_idle_p50_ms"`
	CrossedP99Ms    float64       `json:"two_servers_crossed_idle_p99_ms"`
	VerifyOK        bool          `json:"verify_ok"`
	CrossingChecked bool          `json:"crossing_ok"`
	Paced           []ShardsPaced `json:"paced"`
}

// Rows implements Result.
func (r ShardsResult) Rows() []Row {
	rows := []Row{{
		Figure:    fmt.Sprintf("sharded fan-out, committed inbox rows/s on 2 servers (%d members, %s messages, %.0f%% of the entries crossed)", r.Members, num(float64(r.Messages)), 100*r.CrossedShare),
		Value:     num(r.TwoRowsPerSec),
		Reference: fmt.Sprintf("the same on 1 server, same run: %s rows/s (both servers are databases of one PostgreSQL on this machine)", num(r.OneRowsPerSec)),
		Ratio:     ratio(r.TwoRowsPerSec, r.OneRowsPerSec),
	}, {
		Figure:    "idle, append -> NOTIFY of the entry's commit on the user's server, crossed (member on the other server), p50 / p99",
		Value:     fmt.Sprintf("%s / %s", ms(r.CrossedP50Ms), ms(r.CrossedP99Ms)),
		Reference: fmt.Sprintf("the same message's member on the conversation's server: %s / %s (1 server: %s / %s)", ms(r.LocalP50Ms), ms(r.LocalP99Ms), ms(r.OneP50Ms), ms(r.OneP99Ms)),
		Ratio:     fmt.Sprintf("p50 %s, p99 %s", ratio(r.CrossedP50Ms, r.LocalP50Ms), ratio(r.CrossedP99Ms, r.LocalP99Ms)),
	}}
	for _, p := range r.Paced {
		rows = append(rows, Row{
			Figure:    fmt.Sprintf("at %d msg/s, append -> push on the member's WebSocket (a gateway reading every server) on 2 servers: crossed / local member, p50 / p99", p.Rate),
			Value:     fmt.Sprintf("%s / %s, local %s / %s", ms(p.CrossedPushP50Ms), ms(p.CrossedPushP99Ms), ms(p.LocalPushP50Ms), ms(p.LocalPushP99Ms)),
			Reference: fmt.Sprintf("the same load on 1 server, same run: %s / %s", ms(p.OnePushP50Ms), ms(p.OnePushP99Ms)),
			Ratio:     fmt.Sprintf("crossed p50 %s of 1 server's", ratio(p.CrossedPushP50Ms, p.OnePushP50Ms)),
		}, Row{
			Figure:    fmt.Sprintf("at %d msg/s, append -> NOTIFY of the entry's commit (what wakes a push) on 2 servers: crossed / local member, p50 / p99", p.Rate),
			Value:     fmt.Sprintf("%s / %s, local %s / %s", ms(p.CrossedP50Ms), ms(p.CrossedP99Ms), ms(p.LocalP50Ms), ms(p.LocalP99Ms)),
			Reference: fmt.Sprintf("the same load on 1 server, same run: %s / %s", ms(p.OneP50Ms), ms(p.OneP99Ms)),
			Ratio:     fmt.Sprintf("crossed p50 %s of 1 server's", ratio(p.CrossedP50Ms, p.OneP50Ms)),
		})
	}
	return rows
}

// server is one server of the figure's deployment.
type shardServer struct {
	url  string
	pool *pgxpool.Pool
	stop func()
}

// Shards measures what sharding the projection costs on one machine: the
// same load projected on one server and on two (databases of the same
// PostgreSQL, each with its conversation stage, relay and user stage, over
// one kfake), committed inbox rows/s and the share of entries that crossed;
// then, idle, the time from append to the NOTIFY of an entry's commit for a
// member on the conversation's server and for one on the other server, of
// the same messages; then the same latency under paced loads (Rates), of
// a sample conversation's members beside a background load, both to the
// NOTIFY that wakes a gateway's push and to the push itself on each
// member's WebSocket, through an in-process gateway that reads every
// server (the placement's, as inboxd gateway does).
func Shards(ctx context.Context, env *Env, cfg ShardsConfig) (ShardsResult, error) {
	cfg.setDefaults()
	res := ShardsResult{Messages: cfg.Messages, Members: cfg.Members}
	for _, n := range []int{1, 2} {
		if err := shardsRun(ctx, env, cfg, n, &res); err != nil {
			return res, fmt.Errorf("%d servers: %w", n, err)
		}
	}
	return res, nil
}

func shardsRun(ctx context.Context, env *Env, cfg ShardsConfig, n int, res *ShardsResult) error {
	progress := env.Progress
	pl, err := env.newPipeline(ctx, fmt.Sprintf("shards%d", n), cfg.Partitions)
	if err != nil {
		return err
	}
	defer pl.Close()
	parts := int32(cfg.Partitions)
	var rows []placement.Assignment
	if n == 2 {
		for p := int32(1); p < parts; p += 2 {
			rows = append(rows, placement.Assignment{Partition: p, Server: 2})
		}
	}
	m := placement.NewMap(1, []placement.Server{{ID: 1, Name: "one"}, {ID: 2, Name: "two"}}, rows...)
	servers := []*shardServer{{url: pl.url, pool: pl.pool}}
	if n == 2 {
		url, drop, err := env.newDatabase(ctx, "shards2b")
		if err != nil {
			return err
		}
		defer drop()
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return err
		}
		defer pool.Close()
		servers = append(servers, &shardServer{url: url, pool: pool})
	}
	deliveries := events.DefaultTopic + ".deliveries"
	if n == 2 {
		if err := producer.EnsureDeliveriesTopic(ctx, pl.prod.Client(), producer.Config{Brokers: pl.brokers, Logger: env.Log}, deliveries, parts, time.Hour); err != nil {
			return err
		}
	}
	for i, s := range servers {
		id := int32(i + 1)
		fcfg := fanout.Config{Brokers: pl.brokers, Logger: env.Log, Group: fmt.Sprintf("bench-shards.%d", id)}
		var d *fanout.Deliverer
		if n == 2 {
			owns := func(p int32) bool { return m.Server(p) == id }
			fcfg.Owns, fcfg.Users = owns, placement.Users{Map: m, Server: id, Partitions: parts}
			// Its own connections: the relay holds one, the user stage
			// applies through another, beside the fanout's pool.
			dpool, err := pgxpool.New(ctx, s.url)
			if err != nil {
				return err
			}
			defer dpool.Close()
			if d, err = fanout.NewDeliverer(fanout.DelivererConfig{Brokers: pl.brokers, Topic: deliveries,
				Group: fmt.Sprintf("bench-deliveries.%d", id), Owns: owns, Logger: env.Log}, dpool); err != nil {
				return err
			}
		}
		fo, err := fanout.New(fcfg, s.pool)
		if err != nil {
			return err
		}
		sctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _ = fo.Run(sctx) }()
		if d != nil {
			wg.Add(1)
			go func() { defer wg.Done(); _ = d.Run(sctx) }()
		}
		s.stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
		defer s.stop()
	}

	// Conversations of cfg.Members distinct members over a shared user
	// set, as the fanout figure's.
	users := int64(max(cfg.Conversations*cfg.Members/4, cfg.Members))
	convs := make([][]int64, cfg.Conversations)
	for i := range convs {
		base := int64(i * 7919)
		e := events.New(events.ConversationCreated, int64(i+1), 1+base%users)
		convs[i] = []int64{e.ActorID}
		for k := 1; k < cfg.Members; k++ {
			u := 1 + (base+int64(k))%users
			e.Members = append(e.Members, u)
			convs[i] = append(convs[i], u)
		}
		pl.prod.AppendAsync(ctx, e, func(_ producer.Position, err error) {
			if err != nil {
				env.Log.Error("append", "err", err)
			}
		})
	}
	caughtUp := func(timeout time.Duration) error {
		return shardsCaughtUp(ctx, pl, servers, m, deliveries, n == 2, timeout)
	}
	if err := caughtUp(5 * time.Minute); err != nil {
		return err
	}
	for _, s := range servers {
		if _, err := s.pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
			return err
		}
	}
	fmt.Fprintf(progress, "bench shards: %d servers, %d conversations of %d members created\n", n, cfg.Conversations, cfg.Members)

	// Idle: one message at a time into a conversation with a member on
	// each side.
	ci, local, crossed := 0, convs[0][0], int64(0)
	if n == 2 {
		for i, c := range convs {
			conv := m.Server(placement.OfConversation(int64(i+1), parts))
			var l, x int64
			for _, u := range c {
				if m.Server(placement.OfUser(u, parts)) == conv {
					l = u
				} else {
					x = u
				}
			}
			if l != 0 && x != 0 {
				ci, local, crossed = i, l, x
				break
			}
		}
		if crossed == 0 {
			return fmt.Errorf("no conversation with members on both servers")
		}
	}
	lat, err := shardsIdle(ctx, pl.prod, servers, m, parts, int64(ci+1), convs[ci][0], local, crossed)
	if err != nil {
		return err
	}
	if n == 1 {
		res.OneP50Ms, res.OneP99Ms = lat[0].P50, lat[0].P99
	} else {
		res.LocalP50Ms, res.LocalP99Ms = lat[0].P50, lat[0].P99
		res.CrossedP50Ms, res.CrossedP99Ms = lat[1].P50, lat[1].P99
	}
	// Paced: a sample conversation of three users of its own (a sender,
	// a member on the conversation's server and, on two servers, one on
	// the other), whose heads only its messages move, under a background
	// load into the others at each rate.
	sample := int64(cfg.Conversations + 1)
	sender, sLocal, sCrossed := users+1, int64(0), int64(0)
	home := m.Server(placement.OfConversation(sample, parts))
	for u := users + 2; sLocal == 0 || (n == 2 && sCrossed == 0); u++ {
		if m.Server(placement.OfUser(u, parts)) == home {
			if sLocal == 0 {
				sLocal = u
			}
		} else if sCrossed == 0 {
			sCrossed = u
		}
	}
	if n == 1 {
		sCrossed = 0
	}
	ce := events.New(events.ConversationCreated, sample, sender)
	ce.Members = []int64{sLocal}
	if sCrossed != 0 {
		ce.Members = append(ce.Members, sCrossed)
	}
	if _, err := pl.prod.Append(ctx, ce); err != nil {
		return err
	}
	if err := caughtUp(time.Minute); err != nil {
		return err
	}
	gw, err := shardsGateway(ctx, env, servers, m, n, parts, pl.prod)
	if err != nil {
		return err
	}
	defer gw.stop()
	for i, rate := range cfg.Rates {
		lat, push, err := shardsPaced(ctx, pl.prod, servers, m, parts, rate, cfg.PacedFor, convs, sample, sender, sLocal, sCrossed, gw)
		if err != nil {
			return fmt.Errorf("paced at %d msg/s: %w", rate, err)
		}
		if len(res.Paced) <= i {
			res.Paced = append(res.Paced, ShardsPaced{Rate: rate})
		}
		p := &res.Paced[i]
		if n == 1 {
			p.OneP50Ms, p.OneP99Ms = lat[0].P50, lat[0].P99
			p.OnePushP50Ms, p.OnePushP99Ms = push[0].P50, push[0].P99
		} else {
			p.LocalP50Ms, p.LocalP99Ms = lat[0].P50, lat[0].P99
			p.CrossedP50Ms, p.CrossedP99Ms = lat[1].P50, lat[1].P99
			p.LocalPushP50Ms, p.LocalPushP99Ms = push[0].P50, push[0].P99
			p.CrossedPushP50Ms, p.CrossedPushP99Ms = push[1].P50, push[1].P99
		}
		fmt.Fprintf(progress, "bench shards: %d servers at %d msg/s: NOTIFY p50 %s local, %s crossed; push p50 %s local, %s crossed\n",
			n, rate, ms(lat[0].P50), ms(lat[1].P50), ms(push[0].P50), ms(push[1].P50))
		if err := caughtUp(5 * time.Minute); err != nil {
			return err
		}
	}

	count := func() (total, remote int64, err error) {
		for _, s := range servers {
			var t, r int64
			if err := s.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE NOT EXISTS
  (SELECT 1 FROM conversations c WHERE c.id = i.conversation_id)) FROM inbox i`).Scan(&t, &r); err != nil {
				return 0, 0, err
			}
			total, remote = total+t, remote+r
		}
		return total, remote, nil
	}
	t0, r0, err := count()
	if err != nil {
		return err
	}
	body := strings.Repeat("x", 32)
	start := time.Now()
	for i := range cfg.Messages {
		c := i % cfg.Conversations
		e := events.New(events.MessageSent, int64(c+1), convs[c][0])
		e.MsgID, e.Body = uuid.NewString(), &body
		pl.prod.AppendAsync(ctx, e, func(_ producer.Position, err error) {
			if err != nil {
				env.Log.Error("append", "err", err)
			}
		})
	}
	if err := caughtUp(30 * time.Minute); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	t1, r1, err := count()
	if err != nil {
		return err
	}
	rate := float64(t1-t0) / secs
	fmt.Fprintf(progress, "bench shards: %d servers: %s inbox rows/s\n", n, num(rate))
	for _, s := range servers {
		s.stop()
	}
	if n == 1 {
		res.OneRowsPerSec = rate
		rep, err := projector.Verify(ctx, pl.pool)
		if err != nil {
			return err
		}
		res.VerifyOK = rep.OK()
		return nil
	}
	res.TwoRowsPerSec = rate
	res.CrossedShare = float64(r1-r0) / float64(t1-t0)
	qs := make([]projector.Querier, len(servers))
	ok := true
	for i, s := range servers {
		qs[i] = s.pool
		rep, err := projector.VerifyServer(ctx, s.pool)
		if err != nil {
			return err
		}
		ok = ok && rep.OK()
	}
	x, err := projector.VerifyCrossing(ctx, qs)
	if err != nil {
		return err
	}
	res.VerifyOK, res.CrossingChecked = res.VerifyOK && ok, x.Violations == 0
	if !ok || x.Violations > 0 {
		return fmt.Errorf("the sharded projection does not verify: %v", x.Samples)
	}
	return nil
}

// shardsCaughtUp waits until every server applied its partitions of the
// event topic and, sharded, the outboxes are empty and the deliveries
// applied.
func shardsCaughtUp(ctx context.Context, pl *pipeline, servers []*shardServer, m *placement.Map, deliveries string, sharded bool,
	timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := pl.prod.Flush(ctx); err != nil {
		return err
	}
	adm := kadm.NewClient(pl.prod.Client())
	applied := func(topic string) (bool, error) {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return false, err
		}
		ok := true
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset == 0 || !ok {
				return
			}
			var next int64
			_ = servers[m.Server(o.Partition)-1].pool.QueryRow(ctx,
				`SELECT next_offset FROM consumer_offsets WHERE topic = $1 AND "partition" = $2`, topic, o.Partition).Scan(&next)
			ok = next >= o.Offset
		})
		return ok, nil
	}
	for {
		ok, err := applied(events.DefaultTopic)
		if err != nil {
			return err
		}
		if ok && sharded {
			for _, s := range servers {
				var rows int64
				if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&rows); err != nil {
					return err
				}
				ok = ok && rows == 0
			}
			if ok {
				if ok, err = applied(deliveries); err != nil {
					return err
				}
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not caught up after %v", timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// shardsIdle appends 50 messages of sender into conv, one at a time, and
// measures append -> NOTIFY of the new head of local (a member on the
// conversation's server) and, when crossed is not 0, of crossed (on its
// own server).
func shardsIdle(ctx context.Context, prod *producer.Producer, servers []*shardServer, m *placement.Map, parts int32,
	conv, sender, local, crossed int64) ([2]Dist, error) {
	type waiter struct {
		user int64
		conn *pgxpool.Conn
	}
	var ws []waiter
	for _, u := range []int64{local, crossed} {
		if u == 0 {
			continue
		}
		c, err := servers[m.Server(placement.OfUser(u, parts))-1].pool.Acquire(ctx)
		if err != nil {
			return [2]Dist{}, err
		}
		defer c.Release()
		if _, err := c.Exec(ctx, "LISTEN "+projection.DefaultChannel); err != nil {
			return [2]Dist{}, err
		}
		ws = append(ws, waiter{u, c})
	}
	lat := make([][]float64, len(ws))
	body := "ping"
	for range 50 {
		e := events.New(events.MessageSent, conv, sender)
		e.MsgID, e.Body = uuid.NewString(), &body
		t0 := time.Now()
		if _, err := prod.Append(ctx, e); err != nil {
			return [2]Dist{}, err
		}
		errs := make([]error, len(ws))
		var wg sync.WaitGroup
		for i, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				for {
					n, err := w.conn.Conn().WaitForNotification(wctx)
					if err != nil {
						errs[i] = fmt.Errorf("wait for user %d's head: %w", w.user, err)
						return
					}
					if _, ok := projection.ParseNotification(n.Payload).Heads[w.user]; ok {
						lat[i] = append(lat[i], float64(time.Since(t0).Microseconds())/1000)
						return
					}
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return [2]Dist{}, err
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	var out [2]Dist
	for i := range lat {
		out[i] = newDist(lat[i])
	}
	return out, nil
}

// shardsPaced appends rate messages a second for dur: every one into the
// background conversations but, ten times a second, one of sender into
// conv, whose members local (on the conversation's server) and crossed
// (on the other, when not 0) get one entry each; it measures, for those,
// append -> NOTIFY of the member's new head on its server.
func shardsPaced(ctx context.Context, prod *producer.Producer, servers []*shardServer, m *placement.Map, parts int32,
	rate int, dur time.Duration, convs [][]int64, conv, sender, local, crossed int64, gw *shardsGW) (notify, push [2]Dist, err error) {
	users := []int64{local, crossed}
	var heads [2]int64
	var conns [2]*pgxpool.Conn
	for i, u := range users {
		if u == 0 {
			continue
		}
		pool := servers[m.Server(placement.OfUser(u, parts))-1].pool
		if err := pool.QueryRow(ctx, `SELECT coalesce((SELECT inbox_seq FROM users WHERE id = $1), 0)`, u).Scan(&heads[i]); err != nil {
			return notify, push, err
		}
		c, err := pool.Acquire(ctx)
		if err != nil {
			return notify, push, err
		}
		defer c.Release()
		if _, err := c.Exec(ctx, "LISTEN "+projection.DefaultChannel); err != nil {
			return notify, push, err
		}
		conns[i] = c
	}
	var mu sync.Mutex
	var sent []time.Time // of the sample messages, in order
	var lat, pushed [2][]float64
	// The members' WebSockets, from their heads: a sample message's body
	// is its append time, which the push carries back.
	var fs []*wsFollower
	for i, u := range users {
		if u == 0 {
			continue
		}
		tok, err := gateway.IssueToken(gw.secret, u, time.Hour)
		if err != nil {
			return notify, push, err
		}
		fs = append(fs, &wsFollower{dialer: websocket.DefaultDialer, addr: gw.addr, tok: tok, reconns: &gw.reconns, start: heads[i],
			frame: readFrames(nil, func(e *wsEntry, now int64) {
				if e.Message == nil || !e.Message.Body.IsText {
					return
				}
				if t0, ok := strings.CutPrefix(e.Message.Body.Text, shardsSamplePrefix); ok {
					if ns, err := strconv.ParseInt(t0, 10, 64); err == nil {
						mu.Lock()
						pushed[i] = append(pushed[i], float64(now-ns)/1e6)
						mu.Unlock()
					}
				}
			})})
	}
	stopFollow, err := followAll(ctx, fs, 2)
	if err != nil {
		return notify, push, err
	}
	defer stopFollow()
	// Only the sample's messages give its members entries: the k-th one
	// sent is the member's entry base+k, and a notification of head h
	// covers every sample message up to h-base.
	wctx, stopWait := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, c := range conns {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, base, seen := users[i], heads[i], 0
			for {
				n, err := c.Conn().WaitForNotification(wctx)
				if err != nil {
					return
				}
				h, ok := projection.ParseNotification(n.Payload).Heads[u]
				if !ok {
					continue
				}
				now := time.Now()
				var at []time.Time
				mu.Lock()
				at = sent
				mu.Unlock()
				for seen < len(at) && base+int64(seen)+1 <= h {
					lat[i] = append(lat[i], float64(now.Sub(at[seen]).Microseconds())/1000)
					seen++
				}
			}
		}()
	}
	body := strings.Repeat("x", 32)
	every := max(rate/10, 1)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(dur)
	for k := 0; time.Now().Before(end); k++ {
		<-tick.C
		var e *events.Event
		if k%every == 0 {
			e = events.New(events.MessageSent, conv, sender)
			now := time.Now()
			e.MsgID, e.Body = uuid.NewString(), events.Ptr(shardsSamplePrefix+strconv.FormatInt(now.UnixNano(), 10))
			mu.Lock()
			sent = append(sent, now)
			mu.Unlock()
		} else {
			c := k % len(convs)
			e = events.New(events.MessageSent, int64(c+1), convs[c][0])
			e.MsgID, e.Body = uuid.NewString(), &body
		}
		prod.AppendAsync(ctx, e, func(_ producer.Position, err error) {})
	}
	time.Sleep(2 * time.Second)
	stopWait()
	wg.Wait()
	stopFollow()
	mu.Lock()
	defer mu.Unlock()
	for i := range lat {
		notify[i], push[i] = newDist(lat[i]), newDist(pushed[i])
	}
	if len(pushed[0]) == 0 || (crossed != 0 && len(pushed[1]) == 0) {
		return notify, push, fmt.Errorf("no push of the sample conversation reached its members' WebSockets (%d, %d)", len(pushed[0]), len(pushed[1]))
	}
	return notify, push, nil
}

// shardsSamplePrefix begins the body of a sample message, followed by its
// append time (Unix ns).
const shardsSamplePrefix = "shards:"

// shardsGW is the figure's in-process gateway over its servers.
type shardsGW struct {
	addr    string
	secret  []byte
	reconns atomic.Int64
	stop    func()
}

// shardsGateway starts a gateway that reads every server of m (n of them)
// and serves /v1/ws on a local port until stop.
func shardsGateway(ctx context.Context, env *Env, servers []*shardServer, m *placement.Map, n int, parts int32,
	prod *producer.Producer) (*shardsGW, error) {
	pl := gateway.Placement{Map: placement.Single(), Partitions: parts}
	if n > 1 {
		pl.Map = m
	}
	for _, s := range servers {
		pl.Pools = append(pl.Pools, s.pool)
	}
	gw := &shardsGW{secret: []byte(randomSecret())}
	g, err := gateway.NewOn(gateway.Config{AuthSecret: gw.secret, Logger: env.Log}, pl, prod)
	if err != nil {
		return nil, err
	}
	ws, err := g.NewWebSocket(gateway.WSConfig{})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/ws", ws)
	mux.Handle("/", g.Handler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	gw.addr = ln.Addr().String()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Listen(lctx) })
	wg.Go(func() { _ = ws.Run(lctx) })
	wg.Go(func() { _ = srv.Serve(ln) })
	gw.stop = sync.OnceFunc(func() {
		g.Drain()
		_ = srv.Close()
		cancel()
		wg.Wait()
	})
	return gw, nil
}
