package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/protocol"
)

// supervised is a process restarted whenever it exits, as a supervisor
// restarts inboxd fanout and gateway when the placement changes.
type supervised struct {
	name     string
	start    func() *testenv.Proc
	mu       sync.Mutex
	proc     *testenv.Proc
	restarts int
	stopping atomic.Bool
	done     chan struct{}
}

func supervise(t *testing.T, name string, start func() *testenv.Proc) *supervised {
	s := &supervised{name: name, start: start, proc: start(), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for !s.stopping.Load() {
			time.Sleep(100 * time.Millisecond)
			s.mu.Lock()
			if s.proc.Exited() && !s.stopping.Load() {
				s.proc = s.start()
				s.restarts++
			}
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop ends the supervision and the process (SIGTERM); its exit status is
// not checked (a placement change ends it with 1).
func (s *supervised) stop(t *testing.T) {
	if s.stopping.Swap(true) {
		return
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.proc.Stop(20 * time.Second)
}

// Three PostgreSQL servers, the partitions on servers 1 and 2 and server 3
// added empty; fanouts and a gateway run supervised (each exits when the
// placement changes and is started again). While senders post and SDK
// clients follow their inboxes through the gateway (WebSocket and
// long-polling), inboxd shards move takes a third of the partitions, one
// from each server, to server 3: first a move killed mid-way, then the
// same command run again, which resumes it and moves the other. Every
// client sees every entry of its inbox once, in order, with no gap, and
// each conversation's messages once in seq order; inboxd verify is clean
// on each server and across them; the moves print each pause.
func TestShardsMoveUnderLoadWithClients(t *testing.T) {
	if testing.Short() {
		t.Skip("moves partitions of running processes")
	}
	env := testenv.New(t, testenv.Options{Partitions: 6, Servers: 1})
	srv := pgtest.StartServer(t)
	urls := []string{pgtest.NewDatabaseOn(t, srv.URL), pgtest.NewDatabaseOn(t, srv.URL)}
	base := []string{"DATABASE_URL=" + env.DatabaseURL, "INBOXD_KAFKA_BROKERS=" + strings.Join(env.Brokers, ","),
		"INBOXD_TOPIC=" + env.Topic, "INBOXD_LOG_LEVEL=warn"}
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(testenv.Binary(t), args...)
		cmd.Env = append(os.Environ(), base...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) string {
		out, err := cli(args...)
		require.NoError(t, err, "%v: %s", args, out)
		return out
	}
	must("shards", "add-server", "--dsn", urls[0])
	must("shards", "add-server", "--dsn", urls[1])
	must("shards", "assign", "--target-server", "2", "--partition-ids", "1,3,5")

	var roles []*supervised
	for server := 1; server <= 3; server++ {
		env := append(slices.Clone(base), "INBOXD_GROUP=moved", fmt.Sprintf("INBOXD_INSTANCE_ID=server-%d", server),
			fmt.Sprintf("INBOXD_SHARD_SERVER=%d", server), "INBOXD_SESSION_TIMEOUT=6s", "INBOXD_HTTP_ADDR=127.0.0.1:0")
		roles = append(roles, supervise(t, fmt.Sprintf("fanout of server %d", server),
			func() *testenv.Proc { return testenv.Start(t, env, "fanout") }))
	}
	port := testenv.FreePort(t)
	gwEnv := append(slices.Clone(base), "INBOXD_AUTH_SECRET="+svcSecret, fmt.Sprintf("INBOXD_HTTP_ADDR=127.0.0.1:%d", port),
		"INBOXD_ACK_WAIT=3s", "INBOXD_SEND_RATE=100000", "INBOXD_SYNC_RATE=100000", "INBOXD_RECONNECT_HINTS=false",
		"INBOXD_TOO_LONG_LAG=1000000", "INBOXD_PRESENCE_EXPIRY=3s")
	roles = append(roles, supervise(t, "gateway", func() *testenv.Proc { return testenv.Start(t, gwEnv, "gateway") }))
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitReady(t, url+"/readyz")

	// Sixteen users in eight conversations of four; most conversations
	// and users' inboxes cross servers.
	rnd := rand.New(rand.NewPCG(61, 61))
	var convs [][]int64
	var cids []int64
	for range 8 {
		var members []int64
		for len(members) < 4 {
			if u := int64(1 + rnd.IntN(16)); !slices.Contains(members, u) {
				members = append(members, u)
			}
		}
		code, out, err := (&api{t: t, base: url, token: token(t, members[0])}).call("POST", "/v1/conversations",
			map[string]any{"title": "moved", "members": members[1:]})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, code, "%v", out)
		convs, cids = append(convs, members), append(cids, int64(out["conversation_id"].(float64)))
	}

	// Every user follows its inbox with the SDK, half over WebSocket and
	// half long-polling, and records what it is handed.
	type seen struct {
		mu      sync.Mutex
		entries []protocol.Entry
	}
	followers := map[int64]*seen{}
	ctx, cancel := context.WithCancel(context.Background())
	var runs sync.WaitGroup
	for u := int64(1); u <= 16; u++ {
		s := &seen{}
		followers[u] = s
		tr := client.TransportWebSocket
		if u%2 == 0 {
			tr = client.TransportPolling
		}
		c, err := client.New(client.Config{BaseURL: url, Token: token(t, u), Transport: tr, Logger: env.Logger,
			Handler: client.Handler{OnEntry: func(_ context.Context, e client.Entry) error {
				s.mu.Lock()
				s.entries = append(s.entries, e)
				s.mu.Unlock()
				return nil
			}}})
		require.NoError(t, err)
		runs.Add(1)
		go func() {
			defer runs.Done()
			if err := c.Run(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("user %d's client stopped: %v", u, err)
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		runs.Wait()
	})

	// The senders, retrying each msg_id until it has a seq.
	var sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for s := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(s), 9))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				i := r.IntN(len(cids))
				a := &api{t: t, base: url, token: token(t, convs[i][r.IntN(4)])}
				if _, _, err := sendUntilSeq(func(int) *api { return a }, cids[i], uuid.NewString(), fmt.Sprintf("sender %d send %d", s, n)); err != nil {
					t.Error(err)
					return
				}
				sent.Add(1)
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	time.Sleep(2 * time.Second)

	// A move killed once it paused its partition, then the same command
	// again for both partitions: it resumes the first and moves the
	// second.
	mover := testenv.Start(t, append(slices.Clone(base), "INBOXD_LOG_LEVEL=info"), "shards", "move", "--target-server", "3", "--partition-ids", "2", "--presence-expiry", "3s")
	require.NoError(t, mover.WaitOutput("move started", time.Minute))
	mover.Kill()
	ctxDB := testenv.Ctx(t, 5*time.Minute)
	m, err := placement.Load(ctxDB, env.Pool)
	require.NoError(t, err)
	require.Equal(t, placement.Moving, m.Assignment(2).State, "the killed move left partition 2 moving")
	time.Sleep(time.Second)
	start := time.Now()
	out := must("shards", "move", "--target-server", "3", "--partition-ids", "2,5", "--presence-expiry", "3s")
	moveTime := time.Since(start)
	t.Logf("inboxd shards move, resumed, in %v:\n%s", moveTime, out)
	require.Regexp(t, regexp.MustCompile(`pause per partition p50 \S+, max \S+`), out)
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	require.False(t, t.Failed())

	m, err = placement.Load(ctxDB, env.Pool)
	require.NoError(t, err)
	require.Equal(t, []int32{2, 5}, m.Partitions(3, 6))
	require.Equal(t, []int32{0, 4}, m.Partitions(1, 6))
	require.Equal(t, []int32{1, 3}, m.Partitions(2, 6))

	// The truth: each conversation's texts on its server now, and each
	// user's head on its server.
	pools := map[int32]*pgxpool.Pool{1: env.Pool}
	for i, u := range urls {
		pool, err := pgxpool.New(ctxDB, u)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		pools[int32(i+2)] = pool
	}
	texts := map[int64][]int64{}
	for _, cid := range cids {
		rows, err := pools[m.Server(placement.OfConversation(cid, 6))].Query(ctxDB,
			`SELECT seq FROM messages WHERE conversation_id = $1 AND kind = 'text' ORDER BY seq`, cid)
		require.NoError(t, err)
		texts[cid], err = pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
	}
	heads := map[int64]int64{}
	for u := int64(1); u <= 16; u++ {
		var head int64
		err := pools[m.Server(placement.OfUser(u, 6))].QueryRow(ctxDB, `SELECT coalesce((SELECT inbox_seq FROM users WHERE id = $1), 0)`, u).Scan(&head)
		require.NoError(t, err)
		heads[u] = head
	}
	for u, s := range followers {
		caughtUp := func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return heads[u] == 0 || len(s.entries) > 0 && s.entries[len(s.entries)-1].InboxSeq >= heads[u]
		}
		for deadline := time.Now().Add(2 * time.Minute); !caughtUp(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				s.mu.Lock()
				n := len(s.entries)
				s.mu.Unlock()
				code, out, err := (&api{t: t, base: url, token: token(t, u)}).call("GET", "/v1/sync?after=0&limit=1", nil)
				t.Fatalf("user %d's client not at its head %d after 2 minutes: %d entries; the gateway's sync: %d head %v %v; on server %d",
					u, heads[u], n, code, out["head"], err, m.Server(placement.OfUser(u, 6)))
			}
		}
	}
	cancel()
	runs.Wait()
	for u, s := range followers {
		got := map[int64][]int64{}
		for i, e := range s.entries {
			if e.InboxSeq != int64(i+1) {
				var lines []string
				for _, x := range s.entries[max(0, i-5):min(len(s.entries), i+5)] {
					lines = append(lines, fmt.Sprintf("client %d: %d/%d kind %s", x.InboxSeq, x.ConversationID, seqOf(x), x.Kind))
				}
				rows, _ := pools[m.Server(placement.OfUser(u, 6))].Query(ctxDB, `SELECT inbox_seq, conversation_id, seq, kind FROM inbox
WHERE user_id = $1 AND inbox_seq BETWEEN $2 AND $3 ORDER BY inbox_seq`, u, i-5, i+15)
				for rows.Next() {
					var a, b, c, d int64
					_ = rows.Scan(&a, &b, &c, &d)
					lines = append(lines, fmt.Sprintf("server: %d: %d/%d kind %d", a, b, c, d))
				}
				rows.Close()
				t.Fatalf("user %d (partition %d): entry %d is inbox_seq %d:\n%s", u, placement.OfUser(u, 6), i+1, e.InboxSeq, strings.Join(lines, "\n"))
			}
			if e.Kind == protocol.KindMessage {
				require.NotNil(t, e.Message, "user %d, entry %d: a message entry without its message", u, e.InboxSeq)
			}
			if e.Kind == protocol.KindMessage && e.Message.Kind == protocol.MessageText {
				got[e.ConversationID] = append(got[e.ConversationID], e.Message.Seq)
			}
		}
		for i, cid := range cids {
			if slices.Contains(convs[i], u) {
				require.Equal(t, texts[cid], got[cid], "user %d, conversation %d: every text once, in seq order", u, cid)
			}
		}
	}
	for _, r := range roles {
		r.stop(t)
	}
	out = must("verify")
	require.Regexp(t, `X1\s+every delivery emitted is applied once, across servers\s+ok`, out)
	restarts := map[string]int{}
	for _, r := range roles {
		restarts[r.name] = r.restarts
	}
	t.Logf("%d sends answered with a seq during the moves; restarts on placement changes %v; the move command took %v", sent.Load(), restarts, moveTime)
}

// seqOf is the seq of an entry's message, 0 for a record.
func seqOf(e protocol.Entry) int64 {
	if e.Message != nil {
		return e.Message.Seq
	}
	return 0
}
