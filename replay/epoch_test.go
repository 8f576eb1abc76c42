package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/projector"
	"github.com/inboxd/inboxd/protocol"
)

type client struct {
	t     *testing.T
	base  string
	token string
}

func (c *client) do(method, path string, body any, out any) int {
	c.t.Helper()
	var rd *bytes.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	require.NoError(c.t, err)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	if out != nil {
		require.NoError(c.t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}

// status sends GET path with If-None-Match and returns the status.
func (c *client) status(path, ifNoneMatch string) int {
	c.t.Helper()
	req, err := http.NewRequest("GET", c.base+path, nil)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("If-None-Match", ifNoneMatch)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	resp.Body.Close()
	return resp.StatusCode
}

type world struct {
	env        *testenv.Env
	stopFanout func()
	c          *client
	conv       int64
}

func newWorld(t *testing.T) *world {
	env := testenv.New(t, testenv.Options{Partitions: 2})
	stopFanout := env.StartFanout(t)
	g, err := gateway.NewOn(gateway.Config{AuthSecret: []byte("replay-test-secret-0123456789"), DevMode: true,
		AckWait: 20 * time.Second, Logger: env.Logger}, gateway.Placement{Pools: env.Pools, Map: env.Map, Partitions: env.Partitions}, env.Producer)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	listened := make(chan struct{})
	go func() { defer close(listened); _ = g.Listen(ctx) }()
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(func() { g.Drain(); srv.Close(); cancel(); <-listened })

	c := &client{t: t, base: srv.URL}
	var tok struct{ Token string }
	require.Equal(t, 200, c.do("POST", "/v1/dev/token", map[string]any{"user_id": 42}, &tok))
	c.token = tok.Token
	var created protocol.ConversationCreated
	require.Equal(t, 201, c.do("POST", "/v1/conversations", protocol.CreateConversation{Title: "t", Members: []int64{7}}, &created))
	return &world{env: env, stopFanout: stopFanout, c: c, conv: created.ConversationID}
}

func (w *world) send(body string) {
	code := w.c.do("POST", fmt.Sprintf("/v1/conversations/%d/messages", w.conv),
		map[string]any{"msg_id": uuid.NewString(), "body": body}, nil)
	require.Equal(w.c.t, 201, code)
}

// After a replay, a client holding a cursor of the old epoch gets a clean
// too-long answer under the new epoch, jumps to its head, and then syncs
// normally.
func TestOldEpochCursorGetsTooLongAfterReplay(t *testing.T) {
	w := newWorld(t)
	env, c, send, stopFanout := w.env, w.c, w.send, w.stopFanout
	for i := 0; i < 3; i++ {
		send(fmt.Sprint("before ", i))
	}
	var s1 protocol.SyncAnswer
	require.Equal(t, 200, c.do("GET", "/v1/sync?after=0", nil, &s1))
	require.False(t, s1.TooLong)
	require.NotEmpty(t, s1.Entries)
	oldTag := fmt.Sprintf(`"%d.%d"`, s1.Epoch, s1.Head)
	atHead := fmt.Sprintf("/v1/sync?after=%d", s1.Head)
	require.Equal(t, 304, c.status(atHead, oldTag), "at the head: 304 (from the gateway's head cache)")

	stopFanout()
	res, err := env.Replay(context.Background(), cfg(env))
	require.NoError(t, err)
	require.NotEqual(t, s1.Epoch, res.Epoch)
	env.StartFanout(t)

	// The swap announced the new epoch: the gateway forgets the heads it
	// knew, and the old tag no longer gets a 304.
	deadline := time.Now().Add(10 * time.Second)
	for c.status(atHead, oldTag) == 304 {
		require.True(t, time.Now().Before(deadline), "still 304 for a tag of the old epoch")
		time.Sleep(10 * time.Millisecond)
	}

	var s2 protocol.SyncAnswer
	require.Equal(t, 200, c.do("GET", fmt.Sprintf("/v1/sync?after=%d&epoch=%d", s1.Head, s1.Epoch), nil, &s2))
	require.True(t, s2.TooLong, "an old-epoch cursor gets too long")
	require.Equal(t, res.Epoch, s2.Epoch)
	require.Len(t, s2.Conversations, 1)

	send("after")
	var s3 protocol.SyncAnswer
	require.Equal(t, 200, c.do("GET", fmt.Sprintf("/v1/sync?after=%d&epoch=%d", s2.Head, s2.Epoch), nil, &s3))
	require.False(t, s3.TooLong)
	require.Len(t, s3.Entries, 1, "the new message, and nothing again")
	require.NotNil(t, s3.Entries[0].Message, "a message entry")
	require.Contains(t, s3.Entries[0].Message.Text(), "after")
}

// Retention moves the floor past a stale cursor: that cursor gets too long;
// a cursor at or above the floor still syncs entries.
func TestPrunedCursorGetsTooLong(t *testing.T) {
	w := newWorld(t)
	for i := 0; i < 3; i++ {
		w.send(fmt.Sprint("old ", i))
	}
	var s1 protocol.SyncAnswer
	require.Equal(t, 200, w.c.do("GET", "/v1/sync?after=0", nil, &s1))
	cutoff := time.Now()
	time.Sleep(20 * time.Millisecond)
	w.send("young")
	pool := w.env.UserPool(42)
	res, err := projector.Prune(context.Background(), pool, cutoff, 2)
	require.NoError(t, err)
	require.Positive(t, res.Deleted)
	var floor int64
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT inbox_floor FROM users WHERE id = 42`).Scan(&floor))
	require.Equal(t, s1.Head, floor, "everything before the cutoff went")

	var stale protocol.SyncAnswer
	require.Equal(t, 200, w.c.do("GET", "/v1/sync?after=1", nil, &stale))
	require.True(t, stale.TooLong, "a cursor below the floor gets too long")
	var fresh protocol.SyncAnswer
	require.Equal(t, 200, w.c.do("GET", fmt.Sprintf("/v1/sync?after=%d", s1.Head), nil, &fresh))
	require.False(t, fresh.TooLong)
	require.Len(t, fresh.Entries, 1)
	require.NotNil(t, fresh.Entries[0].Message, "a message entry")
	require.Contains(t, fresh.Entries[0].Message.Text(), "young")
}
