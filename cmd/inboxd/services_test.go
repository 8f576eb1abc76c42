package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/pgserver"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/projector"
)

const svcSecret = "services-test-secret-0123456789"

type api struct {
	t     *testing.T
	base  string
	token string
}

func (a *api) call(method, path string, body any) (int, map[string]any, error) {
	var rd bytes.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = *bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, a.base+path, &rd)
	if err != nil {
		return 0, nil, err
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	c := &http.Client{Timeout: 40 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out := map[string]any{}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}

func waitReady(t *testing.T, url string) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 2*time.Minute, 100*time.Millisecond, "%s becomes ready", url)
}

// Fanout and gateway started before PostgreSQL and Kafka wait with backoff,
// say so in their logs, and work once both are up.
func TestServicesWaitForDependencies(t *testing.T) {
	pgPort, kPort, gPort, fPort := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	env := []string{
		fmt.Sprintf("DATABASE_URL=postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pgPort),
		fmt.Sprintf("INBOXD_KAFKA_BROKERS=127.0.0.1:%d", kPort),
		"INBOXD_AUTH_SECRET=" + svcSecret, "INBOXD_PARTITIONS=2", "INBOXD_LOG_LEVEL=info",
	}
	fo := testenv.Start(t, append(env, fmt.Sprintf("INBOXD_HTTP_ADDR=127.0.0.1:%d", fPort)), "fanout")
	gw := testenv.Start(t, append(env, fmt.Sprintf("INBOXD_HTTP_ADDR=127.0.0.1:%d", gPort)), "gateway")
	for _, p := range []*testenv.Proc{fo, gw} {
		require.NoError(t, p.WaitOutput("waiting for PostgreSQL", time.Minute))
	}

	dir, err := os.MkdirTemp("", "inboxd-svc-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	srv, err := pgserver.Start(context.Background(), pgserver.Config{Dir: filepath.Join(dir, "pg"), Port: pgPort, Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	for _, p := range []*testenv.Proc{fo, gw} {
		require.NoError(t, p.WaitOutput("waiting for Kafka", time.Minute))
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(kPort))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)

	require.NoError(t, fo.WaitOutput("partitions assigned", 2*time.Minute))
	waitReady(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", gPort))
	waitReady(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", fPort))

	a := &api{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", gPort), token: token(t, 42)}
	code, out, err := a.call("POST", "/v1/conversations", map[string]any{"title": "late", "members": []int64{7}})
	require.NoError(t, err)
	require.Equal(t, 201, code, "%v", out)
	code, out, err = a.call("POST", fmt.Sprintf("/v1/conversations/%v/messages", out["conversation_id"]),
		map[string]any{"msg_id": uuid.NewString(), "body": "after the wait"})
	require.NoError(t, err)
	require.Equal(t, 201, code, "%v", out)
	// Dev's notifications list does not exist outside dev; tail says so.
	code, _, err = a.call("GET", "/v1/dev/notifications", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, code)
	tailOut, err := exec.Command(testenv.Binary(t), "tail", "--notifications", "--once", "--url", a.base, "--state", dir).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(tailOut), "it exists in inboxd dev only")
	require.NoError(t, gw.Stop(20*time.Second), gw.Output())
	require.NoError(t, fo.Stop(20*time.Second), fo.Output())
}

// token signs a bearer token for user with the test secret, as the gateway
// verifies them.
func token(t *testing.T, user int64) string {
	t.Helper()
	tok, err := gateway.IssueToken([]byte(svcSecret), user, time.Hour)
	require.NoError(t, err)
	return tok
}

// SIGTERM of the gateway under load (senders and held long-polls): it
// exits within its shutdown timeout, and every send it acknowledged with a
// seq is in the projections with that seq after a restart.
func TestGatewaySigtermUnderLoad(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 4})
	env.StartFanout(t)
	port := testenv.FreePort(t)
	procEnv := []string{"DATABASE_URL=" + env.DatabaseURL, "INBOXD_KAFKA_BROKERS=" + strings.Join(env.Brokers, ","),
		"INBOXD_TOPIC=" + env.Topic, "INBOXD_AUTH_SECRET=" + svcSecret, fmt.Sprintf("INBOXD_HTTP_ADDR=127.0.0.1:%d", port),
		"INBOXD_SHUTDOWN_TIMEOUT=5s", "INBOXD_SEND_RATE=100000", "INBOXD_SYNC_RATE=100000", "INBOXD_LOG_LEVEL=info"}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	gw := testenv.Start(t, procEnv, "gateway")
	waitReady(t, base+"/readyz")

	owner := &api{t: t, base: base, token: token(t, 1)}
	code, out, err := owner.call("POST", "/v1/conversations", map[string]any{"title": "load", "members": []int64{2, 3, 4, 5, 6}})
	require.NoError(t, err)
	require.Equal(t, 201, code)
	conv := int64(out["conversation_id"].(float64))

	var mu sync.Mutex
	acked := map[string]int64{} // msg_id -> seq answered
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for s := int64(1); s <= 4; s++ {
		wg.Add(1)
		go func(user int64) {
			defer wg.Done()
			a := &api{t: t, base: base, token: token(t, user)}
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := uuid.NewString()
				code, out, err := a.call("POST", fmt.Sprintf("/v1/conversations/%d/messages", conv), map[string]any{"msg_id": id, "body": "load"})
				if err != nil {
					continue // the gateway went away: an unacknowledged send
				}
				if code == 201 || code == 200 {
					mu.Lock()
					acked[id] = int64(out["seq"].(float64))
					mu.Unlock()
				}
			}
		}(s)
	}
	for i := 0; i < 20; i++ { // held long-polls
		wg.Add(1)
		go func(user int64) {
			defer wg.Done()
			a := &api{t: t, base: base, token: token(t, user)}
			// A user with an empty inbox: the poll is held until shutdown.
			_, _, _ = a.call("GET", "/v1/sync?wait=30&after=0", nil)
		}(int64(100 + i))
	}
	time.Sleep(1500 * time.Millisecond)
	start := time.Now()
	require.NoError(t, gw.Stop(15*time.Second), gw.Output())
	took := time.Since(start)
	close(stop)
	wg.Wait()
	t.Logf("gateway exited %v after SIGTERM with %d sends acknowledged", took.Round(time.Millisecond), len(acked))
	require.Less(t, took, 7*time.Second, "within the 5s shutdown timeout (plus process exit)")
	require.NotEmpty(t, acked)

	gw2 := testenv.Start(t, procEnv, "gateway")
	waitReady(t, base+"/readyz")
	env.WaitCaughtUp(t, time.Minute)
	ctx := context.Background()
	for id, seq := range acked {
		var got int64
		err := env.Pool.QueryRow(ctx, `SELECT seq FROM messages WHERE msg_id = $1`, id).Scan(&got)
		require.NoError(t, err, "acknowledged msg_id %s is projected", id)
		require.Equal(t, seq, got, "with the seq it was acknowledged with")
	}
	rep, err := projector.Verify(ctx, env.Pool)
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
	require.NoError(t, gw2.Stop(15*time.Second))
}
