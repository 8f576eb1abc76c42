package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/gateway/apikey"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestBackend runs the example against a test gateway (real PostgreSQL,
// kfake, a fanout) with a key made as `inboxd apikey create` makes it,
// twice: the second run, with the same ticket, finds what the first made.
func TestBackend(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	g, err := gateway.New(gateway.Config{AuthSecret: []byte("example-secret-0123456789"), AckWait: 20 * time.Second,
		ServerAPI: gateway.ServerAPIConfig{Rate: rate.Inf, Burst: 100}, Logger: env.Logger}, env.Pool, env.Producer)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Listen(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	_, key, err := apikey.Create(ctx, env.Pool, "support-desk",
		[]string{apikey.ScopeConversations, apikey.ScopeMessages, apikey.ScopeRecords, apikey.ScopeRead})
	require.NoError(t, err)

	var first, second bytes.Buffer
	args := []string{"-url", srv.URL, "-ticket", "7", "-customer", "1", "-agent", "2"}
	require.NoError(t, run(ctx, args, key, &first))
	require.NoError(t, run(ctx, args, key, &second))
	require.Regexp(t, `^ticket 7: conversation \d+, notice from Support at seq 2, 2 members, last seq 2, write mode\n$`, first.String())
	require.Equal(t, first.String(), second.String(), "the same ticket again changes nothing")

	require.Error(t, run(ctx, args, "not-a-key", &bytes.Buffer{}))
	forged := key[:len(key)-1] + "A"
	if forged == key {
		forged = key[:len(key)-1] + "E"
	}
	require.ErrorContains(t, run(ctx, []string{"-url", srv.URL, "-ticket", "8", "-customer", "1", "-agent", "2"},
		forged, &bytes.Buffer{}), "401")
}
