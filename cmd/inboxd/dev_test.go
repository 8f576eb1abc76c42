package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/projector"
	"github.com/inboxd/inboxd/protocol"
)

// `inboxd dev` on its embedded default keeps every event and projection
// across a stop and a start, and goes on from where it stopped.
func TestDevRestartKeepsEverything(t *testing.T) {
	d := newDevInstance(t)
	start := func() *testenv.Proc {
		d.start(t)
		require.NoError(t, d.proc.WaitOutput("partitions assigned", 2*time.Minute))
		return d.proc
	}
	p := start()
	// The demo page is dev's: mounted beside the API by dev, not by the gateway.
	res, err := http.Get(d.url() + "/")
	require.NoError(t, err)
	page, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(page), `<script type="module" src="/demo/app.js">`)
	require.Contains(t, p.Output(), d.dbURL())

	g := workload.New(workload.Config{Seed: 9, Users: 100, Conversations: 20})
	appendAndWait := func(n int) {
		prod, err := producer.New(producer.Config{Brokers: []string{d.brokers()}})
		require.NoError(t, err)
		defer prod.Close()
		ctx := testenv.Ctx(t, time.Minute)
		for i := 0; i < n; i++ {
			_, err := prod.Append(ctx, g.Next())
			require.NoError(t, err)
		}
		pool, err := pgxpool.New(ctx, d.dbURL())
		require.NoError(t, err)
		defer pool.Close()
		require.NoError(t, testenv.WaitCaughtUp(ctx, pool, prod, time.Minute))
	}
	snapshot := func() (msgs, inbox, offsets int64) {
		ctx := testenv.Ctx(t, time.Minute)
		pool, err := pgxpool.New(ctx, d.dbURL())
		require.NoError(t, err)
		defer pool.Close()
		require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM inbox),
			(SELECT coalesce(sum(next_offset),0) FROM consumer_offsets)`).Scan(&msgs, &inbox, &offsets))
		rep, err := projector.Verify(ctx, pool)
		require.NoError(t, err)
		require.True(t, rep.OK(), rep.String())
		return
	}
	appendAndWait(500)
	m1, i1, o1 := snapshot()
	require.Equal(t, int64(500), o1)
	require.NoError(t, p.Stop(30*time.Second), p.Output())

	p = start()
	m2, i2, o2 := snapshot()
	require.Equal(t, [3]int64{m1, i1, o1}, [3]int64{m2, i2, o2}, "restart keeps the log and the projections")
	appendAndWait(300)
	m3, _, o3 := snapshot()
	require.Equal(t, int64(800), o3, "the log continues where it was")
	require.Greater(t, m3, m2)
	require.NoError(t, p.Stop(30*time.Second), p.Output())
	require.False(t, strings.Contains(p.Output(), "panic"))
}

// `inboxd dev --pg-servers 2` is a sharded deployment on one machine: two
// PostgreSQL servers of one placement, the partitions alternating between
// them. A conversation whose members are on both servers reaches each
// member's inbox once, in order; inboxd verify is clean on each server and
// across them; a restart on the same data dir keeps the placement, and a
// start with another number of servers is refused.
func TestDevOnTwoServers(t *testing.T) {
	d := newDevInstance(t)
	d.start(t, "--pg-servers", "2")
	require.NoError(t, d.proc.WaitOutput("partitions assigned", 2*time.Minute))
	second := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/inboxd?sslmode=disable", d.PGPort+1)
	require.Contains(t, d.proc.Output(), "server 2: "+second)

	call := func(method, path, token string, body any, out any) int {
		t.Helper()
		var rd io.Reader
		if body != nil {
			raw, err := json.Marshal(body)
			require.NoError(t, err)
			rd = bytes.NewReader(raw)
		}
		req, err := http.NewRequest(method, d.url()+path, rd)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		if out != nil {
			require.NoError(t, json.Unmarshal(raw, out), "%s", raw)
		}
		return res.StatusCode
	}
	// Ready once every server's stages have their partitions and the
	// gateway listens to both servers.
	waitReady(t, d.url()+"/readyz")
	var ready struct{ Checks map[string]string }
	require.Equal(t, http.StatusOK, call("GET", "/readyz", "", nil, &ready))
	require.Equal(t, "ok", ready.Checks["postgres_2"], "%v", ready.Checks)
	token := func(user int64) string {
		var tok struct{ Token string }
		require.Equal(t, http.StatusOK, call("POST", "/v1/dev/token", "", map[string]int64{"user_id": user}, &tok))
		return tok.Token
	}
	members := []int64{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	var created struct {
		ConversationID int64 `json:"conversation_id"`
	}
	owner := token(1)
	require.Equal(t, http.StatusCreated, call("POST", "/v1/conversations", owner, map[string]any{"title": "both", "members": members}, &created))
	var texts []string
	for i := range 5 {
		texts = append(texts, fmt.Sprintf("text %d", i))
		require.Equal(t, http.StatusCreated, call("POST", fmt.Sprintf("/v1/conversations/%d/messages", created.ConversationID), owner,
			map[string]string{"msg_id": uuid.NewString(), "body": texts[i]}, nil))
	}
	inboxOf := func(user int64) (head int64, got []string) {
		var page protocol.SyncPage
		require.Equal(t, http.StatusOK, call("GET", "/v1/sync?after=0", token(user), nil, &page))
		for _, e := range page.Entries {
			if e.Kind == protocol.KindMessage && e.Message.Kind == protocol.MessageText {
				var s string
				require.NoError(t, json.Unmarshal(e.Message.Body, &s))
				got = append(got, s)
			}
		}
		return page.Head, got
	}
	heads := map[int64]int64{}
	for _, u := range append([]int64{1}, members...) {
		testenv.WaitFor(t, time.Minute, fmt.Sprintf("user %d's inbox", u), func() bool {
			head, got := inboxOf(u)
			if len(got) < len(texts) {
				return false
			}
			require.Equal(t, texts, got, "user %d: every text once, in order", u)
			heads[u] = head
			return true
		})
	}
	ctx := testenv.Ctx(t, time.Minute)
	for i, url := range []string{d.dbURL(), second} {
		pool, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		var users int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM users`).Scan(&users))
		pool.Close()
		require.Positive(t, users, "server %d holds some of the members' inboxes", i+1)
	}
	// Nobody is connected: every member but the sender is notified, by the
	// notifier of the conversation's server, with its inbox_seq and badge
	// read on the member's own server and summed over both.
	testenv.WaitFor(t, time.Minute, "a notification of every member", func() bool {
		var list struct {
			Notifications []struct {
				Notification struct {
					UserID   int64 `json:"user_id"`
					Seq      int64 `json:"seq"`
					InboxSeq int64 `json:"inbox_seq"`
					Badge    int64 `json:"badge"`
				} `json:"notification"`
			} `json:"notifications"`
		}
		require.Equal(t, http.StatusOK, call("GET", "/v1/dev/notifications", "", nil, &list))
		last := map[int64]int64{}
		for _, n := range list.Notifications {
			nf := n.Notification
			require.Positive(t, nf.InboxSeq, "user %d", nf.UserID)
			require.Positive(t, nf.Badge, "user %d", nf.UserID)
			last[nf.UserID] = max(last[nf.UserID], nf.Seq)
		}
		for _, u := range members {
			if last[u] != int64(len(texts)+1) {
				return false
			}
		}
		return true
	})
	vp := testenv.Start(t, nil, "verify", "--database-url", d.dbURL())
	require.NoError(t, vp.Wait(time.Minute), vp.Output())
	require.Contains(t, vp.Output(), "across the 2 servers")

	require.NoError(t, d.proc.Stop(30*time.Second), d.proc.Output())
	d.start(t, "--pg-servers", "2")
	for u, head := range heads {
		got, _ := inboxOf(u)
		require.Equal(t, head, got, "user %d after a restart", u)
	}
	require.NoError(t, d.proc.Stop(30*time.Second), d.proc.Output())
	one := testenv.Start(t, testenv.DevEnv, d.Args("--partitions", "4")...)
	require.Error(t, one.Wait(time.Minute))
	require.Contains(t, one.Output(), "start with --pg-servers 2")
}
