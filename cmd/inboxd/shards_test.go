package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// `inboxd shards`: an existing deployment lists as server 1 holding every
// partition of the topic; add-server migrates an empty database and lists
// it holding nothing, its password hidden; assign places a partition on
// it while nothing is projected; a second add of the same database, a
// missing DSN, an assign to an unknown server or once state exists, and
// an unknown action are refused with exit 1.
func TestShardsCommand(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 3})
	ctx := testenv.Ctx(t, time.Minute)
	run := func(args ...string) (string, int) {
		cmd := exec.Command(testenv.Binary(t), append([]string{"shards"}, args...)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+env.DatabaseURL, "INBOXD_LOG_LEVEL=warn",
			"INBOXD_KAFKA_BROKERS="+strings.Join(env.Brokers, ","), "INBOXD_TOPIC="+env.Topic)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		require.NoError(t, err, string(out))
		return string(out), 0
	}
	out, code := run("list")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "3 partitions")
	require.Regexp(t, `(?m)^1\s+server-1\s+\(the catalog's database\)\s+3 \[0 1 2\]$`, out)

	admin := pgtest.AdminURL(t)
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	name := fmt.Sprintf("inboxd_shard_%d", os.Getpid())
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	_ = conn.Close(ctx)
	t.Cleanup(func() {
		if c, err := pgx.Connect(context.Background(), admin); err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(context.Background())
		}
	})
	second := pgtest.WithDB(admin, name) + "&password=hunter2"
	if !strings.Contains(second, "?") {
		second = strings.Replace(second, "&", "?", 1)
	}
	out, code = run("add-server", "--name", "eu-2", "--dsn", second)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "added server 2 (eu-2)")
	require.NotContains(t, out, "hunter2")

	out, code = run("list", "--json")
	require.Equal(t, 0, code, out)
	var got struct {
		Version    int64 `json:"version"`
		Partitions int32 `json:"partitions"`
		Servers    []struct {
			ID         int32   `json:"id"`
			Name       string  `json:"name"`
			DSN        string  `json:"dsn"`
			Partitions []int32 `json:"partitions"`
		} `json:"servers"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, int64(2), got.Version)
	require.Equal(t, int32(3), got.Partitions)
	require.Len(t, got.Servers, 2)
	require.Equal(t, []int32{0, 1, 2}, got.Servers[0].Partitions)
	require.Equal(t, "eu-2", got.Servers[1].Name)
	require.Empty(t, got.Servers[1].Partitions)
	require.NotContains(t, got.Servers[1].DSN, "hunter2")
	require.Contains(t, got.Servers[1].DSN, name)

	// The initial placement: partition 1 goes to server 2 while nothing
	// is projected; an unknown server and bad partitions are refused, and
	// so is any assign once a server holds state.
	out, code = run("assign", "--target-server", "2", "--partition-ids", "1")
	require.Equal(t, 0, code, out)
	out, code = run("list")
	require.Equal(t, 0, code, out)
	require.Regexp(t, `(?m)^1\s+server-1\s+\(the catalog's database\)\s+2 \[0 2\]$`, out)
	require.Regexp(t, `(?m)^2\s+eu-2\s+.*\s+1 \[1\]$`, out)
	for _, bad := range [][]string{{"--target-server", "3", "--partition-ids", "0"}, {"--target-server", "2", "--partition-ids", "x"}, {"--target-server", "2"}} {
		out, code := run(append([]string{"assign"}, bad...)...)
		require.NotEqual(t, 0, code, "%v: %s", bad, out)
	}
	_, err = env.Pool.Exec(ctx, `INSERT INTO users (id) VALUES (7)`)
	require.NoError(t, err)
	out, code = run("assign", "--target-server", "2", "--partition-ids", "0")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "holds projections")

	for _, bad := range [][]string{
		{"add-server", "--dsn", second},
		{"add-server"},
		{"move"},
		{},
	} {
		out, code := run(bad...)
		require.NotEqual(t, 0, code, "%v: %s", bad, out)
	}
}

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:secret@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgres://u@h/db?password=secret":             "postgres://u@h/db?password=xxxxx",
		"host=h user=u password=secret dbname=db":       "host=h user=u password=xxxxx dbname=db",
		"host=h password='a b' dbname=db":               "host=h password=xxxxx dbname=db",
		"postgres://h/db":                               "postgres://h/db",
	} {
		require.Equal(t, want, redactDSN(in), in)
	}
}
