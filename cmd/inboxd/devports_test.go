package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/producer"
)

// devInstance is an `inboxd dev` the test runs (and may restart) on a
// setup of its own.
type devInstance struct {
	testenv.DevSetup
	proc *testenv.Proc
}

func (d devInstance) url() string { return "http://" + d.Addr() }
func (d devInstance) dbURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/inboxd?sslmode=disable", d.PGPort)
}
func (d devInstance) brokers() string { return fmt.Sprintf("127.0.0.1:%d", d.KafkaPort) }

// cli returns a runner of the inboxd command line against d, in the
// folder work (also its HOME: each test's logins and state stay there):
// run(want, args...) runs `inboxd args...`, requires exit status want and
// returns its output without the trailing newlines.
func (d devInstance) cli(t *testing.T, work string) func(want int, args ...string) string {
	return func(want int, args ...string) string {
		t.Helper()
		cmd := exec.Command(testenv.Binary(t), args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "HOME="+work, "XDG_CONFIG_HOME="+filepath.Join(work, ".config"),
			"INBOXD_URL="+d.url(), "INBOXD_STATE=", "INBOXD_TOKEN=", "NO_COLOR=1")
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		require.Equal(t, want, code, "inboxd %s:\n%s", strings.Join(args, " "), out)
		return strings.TrimRight(string(out), "\n")
	}
}

// newDevInstance picks a data dir and free ports; start runs it.
func newDevInstance(t *testing.T) devInstance {
	pgtest.SkipIfUnit(t)
	if os.Getenv("DATABASE_URL") != "" {
		t.Skip("DATABASE_URL is set: dev would not start its own PostgreSQL")
	}
	s, err := testenv.NewDevSetup()
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(s.Dir) })
	return devInstance{DevSetup: s}
}

func (d *devInstance) start(t *testing.T, extra ...string) {
	for attempt := 0; ; attempt++ {
		d.proc = testenv.Start(t, testenv.DevEnv, d.Args(append([]string{"--partitions", "4"}, extra...)...)...)
		err := d.proc.WaitOutput("gateway listening", 2*time.Minute)
		if err != nil && attempt < 3 && testenv.PortTaken(d.proc.Output()) {
			// A port picked free was taken since by another test's
			// process: move to fresh ones (the data dir stays; callers
			// read the addresses from d).
			s, serr := testenv.NewDevSetup()
			require.NoError(t, serr)
			os.RemoveAll(s.Dir)
			d.PGPort, d.KafkaPort, d.HTTPPort = s.PGPort, s.KafkaPort, s.HTTPPort
			continue
		}
		require.NoError(t, err)
		return
	}
}

// A second dev whose PostgreSQL, Kafka, HTTP port or data dir is the first
// one's exits non-zero naming what is taken, before it touches anything:
// it never attaches to the first one's servers, and the first goes on with
// its data as it was.
func TestDevRefusesTakenPorts(t *testing.T) {
	first := newDevInstance(t)
	first.start(t)
	require.NoError(t, first.proc.WaitOutput("partitions assigned", time.Minute))

	ctx := testenv.Ctx(t, 3*time.Minute)
	prod, err := producer.New(producer.Config{Brokers: []string{first.brokers()}})
	require.NoError(t, err)
	defer prod.Close()
	g := workload.New(workload.Config{Seed: 4, Users: 20, Conversations: 5})
	for i := 0; i < 50; i++ {
		_, err := prod.Append(ctx, g.Next())
		require.NoError(t, err)
	}
	pool, err := pgxpool.New(ctx, first.dbURL())
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, testenv.WaitCaughtUp(ctx, pool, prod, time.Minute))
	snapshot := func() (s [3]int64) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM inbox),
			(SELECT coalesce(sum(next_offset),0) FROM consumer_offsets)`).Scan(&s[0], &s[1], &s[2]))
		return s
	}
	before := snapshot()

	cases := map[string]struct {
		second func(d *devInstance)
		want   []string
	}{
		"PostgreSQL port": {func(d *devInstance) { d.PGPort = first.PGPort },
			[]string{fmt.Sprintf("port 127.0.0.1:%d for the embedded PostgreSQL is taken", first.PGPort), "--pg-port"}},
		"Kafka port": {func(d *devInstance) { d.KafkaPort = first.KafkaPort },
			[]string{fmt.Sprintf("port %d for the embedded Kafka is taken", first.KafkaPort), "--kafka-port"}},
		"HTTP port": {func(d *devInstance) { d.HTTPPort = first.HTTPPort },
			[]string{fmt.Sprintf("port 127.0.0.1:%d for the HTTP API is taken", first.HTTPPort), "--http-addr"}},
		"data dir": {func(d *devInstance) { d.Dir = first.Dir },
			[]string{"data dir " + first.DataDir() + " is in use by another inboxd dev (pid"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var second devInstance
			var p *testenv.Proc
			for attempt := 0; ; attempt++ {
				second = newDevInstance(t)
				c.second(&second)
				p = testenv.Start(t, testenv.DevEnv, second.Args()...)
				require.Error(t, p.Wait(time.Minute), "the second dev exits non-zero:\n%s", p.Output())
				// One of its own fresh ports may have been taken since it
				// was picked: pick again.
				if attempt < 3 && !strings.Contains(p.Output(), c.want[0]) && testenv.PortTaken(p.Output()) {
					continue
				}
				break
			}
			for _, w := range c.want {
				require.Contains(t, p.Output(), w)
			}
			require.NotContains(t, p.Output(), "PostgreSQL started")
			require.NotContains(t, p.Output(), "gateway listening")
			if second.Dir != first.Dir {
				_, err := os.Stat(filepath.Join(second.DataDir(), "pg"))
				require.True(t, os.IsNotExist(err), "the refused dev created nothing")
			}
		})
	}

	require.Equal(t, before, snapshot(), "the first dev's data is untouched")
	require.False(t, first.proc.Exited(), first.proc.Output())
	res, err := http.Get(first.url() + "/readyz")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	for i := 0; i < 10; i++ {
		_, err := prod.Append(ctx, g.Next())
		require.NoError(t, err)
	}
	require.NoError(t, testenv.WaitCaughtUp(ctx, pool, prod, time.Minute))
	require.Equal(t, before[2]+10, snapshot()[2], "and it goes on projecting")
	require.NoError(t, first.proc.Stop(30*time.Second), first.proc.Output())
}

// `inboxd dev --no-fanout` keeps the log and the database up without a
// fanout, so `inboxd replay` runs against a dev setup as docs/operations.md
// describes; dev with its fanout then goes on from where the replay ended.
func TestDevReplayWithoutFanout(t *testing.T) {
	d := newDevInstance(t)
	d.start(t)
	ctx := testenv.Ctx(t, 4*time.Minute)
	g := workload.New(workload.Config{Seed: 5, Users: 30, Conversations: 6})
	appendAndWait := func(n int) [2]int64 {
		prod, err := producer.New(producer.Config{Brokers: []string{d.brokers()}})
		require.NoError(t, err)
		defer prod.Close()
		for i := 0; i < n; i++ {
			_, err := prod.Append(ctx, g.Next())
			require.NoError(t, err)
		}
		pool, err := pgxpool.New(ctx, d.dbURL())
		require.NoError(t, err)
		defer pool.Close()
		require.NoError(t, testenv.WaitCaughtUp(ctx, pool, prod, time.Minute))
		var s [2]int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM messages), (SELECT coalesce(sum(next_offset),0) FROM consumer_offsets)`).Scan(&s[0], &s[1]))
		return s
	}
	before := appendAndWait(200)
	require.NoError(t, d.proc.Stop(30*time.Second))

	d.start(t, "--no-fanout")
	require.Contains(t, d.proc.Output(), "fanout off (--no-fanout)")
	require.NotContains(t, d.proc.Output(), "partitions assigned")
	rp := testenv.Start(t, nil, "replay", "--database-url", d.dbURL(), "--kafka-brokers", d.brokers())
	require.NoError(t, rp.Wait(3*time.Minute), rp.Output())
	require.Contains(t, rp.Output(), "replayed 200 records")
	vp := testenv.Start(t, nil, "verify", "--database-url", d.dbURL())
	require.NoError(t, vp.Wait(time.Minute), vp.Output())
	require.NoError(t, d.proc.Stop(30*time.Second))

	d.start(t)
	after := appendAndWait(50)
	require.Equal(t, before[1]+50, after[1], "the fanout goes on from where the replay ended")
	require.GreaterOrEqual(t, after[0], before[0])
	require.NoError(t, d.proc.Stop(30*time.Second), d.proc.Output())
}
