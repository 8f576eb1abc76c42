package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/shardtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/projector"
	"github.com/inboxd/inboxd/protocol"
)

// A sharded deployment as processes, killed under a send load: two
// servers (the second on a PostgreSQL server of its own, placed with
// inboxd shards), one `inboxd fanout --shard-server N` per server and two
// `inboxd gateway` processes. Senders post through either gateway to
// conversations whose members are on both servers, each retrying its
// msg_id until it gets a seq. Fanouts and gateways are killed with SIGKILL
// at random, 32 times in all, and the second PostgreSQL server is
// restarted once. Afterwards every message sent is projected once, every
// member's inbox has each message of its conversations exactly once, in
// order, with no gap (as sync serves it through a gateway, and in the
// database), and inboxd verify is clean on each server and across them;
// then inboxd replay rebuilds both servers into the same entries.
func TestShardedProcessesKilledUnderSends(t *testing.T) {
	if testing.Short() {
		t.Skip("kills processes under load for a minute")
	}
	env := testenv.New(t, testenv.Options{Partitions: 4, Servers: 1})
	srv := pgtest.StartServer(t)
	secondURL := pgtest.NewDatabaseOn(t, srv.URL)
	cli := func(args ...string) string {
		cmd := exec.Command(testenv.Binary(t), args...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+env.DatabaseURL, "INBOXD_LOG_LEVEL=warn",
			"INBOXD_KAFKA_BROKERS="+strings.Join(env.Brokers, ","), "INBOXD_TOPIC="+env.Topic)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%v: %s", args, out)
		return string(out)
	}
	cli("shards", "add-server", "--dsn", secondURL)
	cli("shards", "assign", "--target-server", "2", "--partition-ids", "1,3")
	ctx := testenv.Ctx(t, 10*time.Minute)
	m, err := placement.Load(ctx, env.Pool)
	require.NoError(t, err)

	base := procEnv(env)
	fanoutEnv := func(server int) []string {
		return append(slices.Clone(base), "INBOXD_GROUP=killed", fmt.Sprintf("INBOXD_INSTANCE_ID=server-%d", server),
			fmt.Sprintf("INBOXD_SHARD_SERVER=%d", server), "INBOXD_SESSION_TIMEOUT=6s", "INBOXD_HTTP_ADDR=127.0.0.1:0",
			"INBOXD_MAX_POLL_RECORDS=20")
	}
	gwPorts := []int{testenv.FreePort(t), testenv.FreePort(t)}
	gatewayProc := func(i int) func() *testenv.Proc {
		return func() *testenv.Proc { return testenv.Start(t, killedGatewayEnv(base, gwPorts[i]), "gateway") }
	}
	roles := killables{
		{name: "fanout of server 1", start: func() *testenv.Proc { return testenv.Start(t, fanoutEnv(1), "fanout") }},
		{name: "fanout of server 2", start: func() *testenv.Proc { return testenv.Start(t, fanoutEnv(2), "fanout") }},
		{name: "gateway 1", port: gwPorts[0], start: gatewayProc(0)},
		{name: "gateway 2", port: gwPorts[1], start: gatewayProc(1)},
	}
	roles.start()
	roles.waitReady(t)
	gw := func(i int, user int64) *api {
		return &api{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", gwPorts[i%2]), token: token(t, user)}
	}

	// Twelve conversations of six members among 40 users, so that most
	// have members on both servers.
	rnd := rand.New(rand.NewPCG(53, 53))
	type conv struct {
		id      int64
		members []int64
	}
	var convs []conv
	for range 12 {
		members := []int64{}
		for len(members) < 6 {
			u := int64(1 + rnd.IntN(40))
			if !slices.Contains(members, u) {
				members = append(members, u)
			}
		}
		code, out, err := gw(0, members[0]).call("POST", "/v1/conversations", map[string]any{"title": "kills", "members": members[1:]})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, code, "%v", out)
		convs = append(convs, conv{id: int64(out["conversation_id"].(float64)), members: members})
	}
	crossing := 0
	for _, c := range convs {
		servers := map[int32]bool{}
		for _, u := range c.members {
			servers[m.Server(placement.OfUser(u, 4))] = true
		}
		if len(servers) > 1 {
			crossing++
		}
	}
	require.Positive(t, crossing, "conversations with members on both servers")

	// The senders: each send retries its msg_id, on either gateway, until
	// it has a seq (201 or 200); 202, 503 and refused connections are what
	// kills cause.
	type sent struct {
		conv, seq int64
		msgID     string
	}
	var (
		mu      sync.Mutex
		acked   []sent
		retries atomic.Int64
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for s := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(s), 7))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				c := convs[r.IntN(len(convs))]
				sender := c.members[r.IntN(len(c.members))]
				id := uuid.NewString()
				seq, retried, err := sendUntilSeq(func(attempt int) *api { return gw(s+attempt, sender) }, c.id, id,
					fmt.Sprintf("sender %d send %d", s, n))
				retries.Add(int64(retried))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = append(acked, sent{conv: c.id, seq: seq, msgID: id})
				mu.Unlock()
			}
		}()
	}

	kills := roles.kill(rnd, killPlan{n: 32, pause: 300 * time.Millisecond, spread: 700 * time.Millisecond, after: func(kill int) {
		if kill != 16 {
			return
		}
		// The second server goes away for a while: its stages retry,
		// the gateways' reads of it fail and their LISTEN reconnects.
		require.NoError(t, srv.Stop())
		time.Sleep(2 * time.Second)
		srv2, err := srv.Restart(context.Background())
		require.NoError(t, err)
		t.Cleanup(func() { _ = srv2.Stop() })
	}})
	close(stop)
	wg.Wait()
	require.False(t, t.Failed())

	// Caught up: every stage applied the log, every outbox relayed and
	// every delivery applied.
	second, err := pgxpool.New(ctx, secondURL)
	require.NoError(t, err)
	t.Cleanup(second.Close)
	world := &testenv.Env{Pool: env.Pool, Pools: []*pgxpool.Pool{env.Pool, second}, Map: m, Partitions: 4,
		Topic: env.Topic, Deliveries: env.Topic + ".deliveries", Producer: env.Producer}
	require.True(t, world.Settle(3*time.Minute), "the stages of both servers caught up")
	roles.waitReady(t)

	// Every send that got a seq is that message, once.
	bySeq := map[[2]int64]string{}
	for _, s := range acked {
		if prev, ok := bySeq[[2]int64{s.conv, s.seq}]; ok {
			require.Equal(t, prev, s.msgID, "two sends answered with seq %d of %d", s.seq, s.conv)
		}
		bySeq[[2]int64{s.conv, s.seq}] = s.msgID
	}
	for _, c := range convs {
		pool := world.ConvPool(c.id)
		rows, err := pool.Query(ctx, `SELECT seq, msg_id::text FROM messages WHERE conversation_id = $1 AND kind = 'text' ORDER BY seq`, c.id)
		require.NoError(t, err)
		for rows.Next() {
			var seq int64
			var id string
			require.NoError(t, rows.Scan(&seq, &id))
			if want, ok := bySeq[[2]int64{c.id, seq}]; ok {
				require.Equal(t, want, id, "conversation %d seq %d", c.id, seq)
				delete(bySeq, [2]int64{c.id, seq})
			}
		}
		require.NoError(t, rows.Err())
	}
	require.Empty(t, bySeq, "sends answered with a seq and not projected")

	// Every member's inbox, as sync serves it through a gateway: each
	// text of its conversations once, in seq order, inbox seqs 1..head.
	texts := map[int64][]int64{}
	for _, c := range convs {
		rows, err := world.ConvPool(c.id).Query(ctx, `SELECT seq FROM messages WHERE conversation_id = $1 AND kind = 'text' ORDER BY seq`, c.id)
		require.NoError(t, err)
		for rows.Next() {
			var seq int64
			require.NoError(t, rows.Scan(&seq))
			texts[c.id] = append(texts[c.id], seq)
		}
		require.NoError(t, rows.Err())
	}
	users := map[int64][]int64{}
	for _, c := range convs {
		for _, u := range c.members {
			users[u] = append(users[u], c.id)
		}
	}
	for u, cs := range users {
		got := map[int64][]int64{}
		entries, head := syncAll(t, fmt.Sprintf("http://127.0.0.1:%d", gwPorts[int(u)%2]), u)
		var after int64
		for _, e := range entries {
			after = e.InboxSeq
			if e.Kind == protocol.KindMessage && e.Message.Kind == protocol.MessageText {
				got[e.ConversationID] = append(got[e.ConversationID], e.Message.Seq)
			}
		}
		require.Equal(t, head, after, "user %d", u)
		for _, c := range cs {
			require.Equal(t, texts[c], got[c], "user %d, conversation %d: every text once, in order", u, c)
		}
	}

	roles.stop(t)
	checkAll := func(when string) {
		out := cli("verify")
		require.Regexp(t, `X1\s+every delivery emitted is applied once, across servers\s+ok`, out, when)
		union := shardtest.Servers{Pools: world.Pools, Map: m, Partitions: 4, Topic: env.Topic}.Union(t)
		rep, err := projector.Verify(ctx, union)
		require.NoError(t, err)
		require.True(t, rep.OK(), "%s: %s", when, rep.String())
	}
	checkAll("after the kills")
	// Each user's message entries, as a set, on the user's server.
	entries := func() map[int64][]string {
		out := map[int64][]string{}
		for u := range users {
			rows, err := world.UserPool(u).Query(ctx, `SELECT conversation_id || '/' || seq FROM inbox WHERE user_id = $1 AND kind = 1 ORDER BY 1`, u)
			require.NoError(t, err)
			for rows.Next() {
				var e string
				require.NoError(t, rows.Scan(&e))
				out[u] = append(out[u], e)
			}
			require.NoError(t, rows.Err())
		}
		return out
	}
	before := entries()
	// inboxd replay rebuilds both servers from the log: the same entries,
	// verified again.
	out := cli("replay")
	require.Contains(t, out, "2 servers rebuilt under the new epoch")
	require.Equal(t, before, entries(), "the rebuilt inboxes hold the same entries")
	checkAll("after the replay")
	total := 0
	for _, ts := range texts {
		total += len(ts)
	}
	require.Equal(t, len(acked), total, "every text projected is a send that got its seq")
	t.Logf("%d kills %v; %d sends answered with a seq (%d texts projected), %d attempts retried; %d of %d conversations span both servers",
		32, kills, len(acked), total, retries.Load(), crossing, len(convs))
}
