package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
)

// `inboxd import` refuses a file with a bad line (exit 1, the line
// named, nothing written), imports a good one through the log and the
// running fanout, and appends nothing the second time.
func TestImportCommand(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 2})
	env.StartFanout(t)
	dir := t.TempDir()
	conv := `{"kind":"conversation","id":"c1","title":"old","members":[1,2],"created_at":"2022-05-01T10:00:00Z"}`
	msg := `{"kind":"message","conversation":"c1","id":"m1","sender":2,"body":"hello from 2022","sent_at":"2022-05-01T10:01:00Z"}`
	bad := filepath.Join(dir, "bad.ndjson")
	require.NoError(t, os.WriteFile(bad, []byte(conv+"\n"+strings.Replace(msg, `"sender":2`, `"sender":3`, 1)+"\n"), 0o600))
	good := filepath.Join(dir, "good.ndjson")
	require.NoError(t, os.WriteFile(good, []byte(conv+"\n"+msg+"\n"), 0o600))

	run := func(args ...string) (string, int) {
		cmd := exec.Command(testenv.Binary(t), append([]string{"import"}, args...)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+env.DatabaseURL, "INBOXD_KAFKA_BROKERS="+strings.Join(env.Brokers, ","),
			"INBOXD_TOPIC="+env.Topic, "INBOXD_REPLICATION_FACTOR=1", "INBOXD_LOG_LEVEL=warn")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		require.NoError(t, err, string(out))
		return string(out), 0
	}
	out, code := run("--file", bad)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "line 2: sender 3 is not a member")
	out, code = run("--file", good, "--check")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "every line is accepted")
	var n int64
	require.NoError(t, env.Pool.QueryRow(t.Context(), `SELECT count(*) FROM messages`).Scan(&n))
	require.Zero(t, n, "a refused or checked file writes nothing")

	out, code = run("--file", good, "--source", "oldchat")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "appended 2 events from line 1")
	var body string
	require.NoError(t, env.Pool.QueryRow(t.Context(), `SELECT body FROM messages WHERE imported AND kind = 'text'`).Scan(&body))
	require.Equal(t, "hello from 2022", body)
	out, code = run("--file", good, "--source", "oldchat")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "already imported")
}
