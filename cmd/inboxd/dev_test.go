package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/projector"
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
