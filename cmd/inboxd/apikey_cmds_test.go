package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/apikey"
	"github.com/inboxd/inboxd/internal/testenv"
)

// `inboxd apikey`: create prints the key once (and it verifies), list shows
// every key without its secret, revoke makes the key fail verification;
// a bad scope, a bad name or a missing id is refused with exit 1.
func TestAPIKeyCommand(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 1})
	ctx := testenv.Ctx(t, time.Minute)
	run := func(args ...string) (string, int) {
		cmd := exec.Command(testenv.Binary(t), append([]string{"apikey"}, args...)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+env.DatabaseURL, "INBOXD_LOG_LEVEL=warn")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		require.NoError(t, err, string(out))
		return string(out), 0
	}
	out, code := run("create", "--name", "billing", "--scopes", "messages,read")
	require.Equal(t, 0, code, out)
	key := regexp.MustCompile(`(?m)^ik_\S+$`).FindString(out)
	require.NotEmpty(t, key, out)
	k, err := apikey.Verify(ctx, env.Pool, key)
	require.NoError(t, err)
	require.Equal(t, []string{"messages", "read"}, k.Scopes)

	out, code = run("list")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "billing")
	require.NotContains(t, out, key[len(key)-20:], "list never shows a secret")

	for _, bad := range [][]string{
		{"create", "--name", "x", "--scopes", "admin"},
		{"create", "--name", "a b", "--scopes", "read"},
		{"create", "--name", "x"},
		{"revoke"},
		{"revoke", "99999"},
		{"rotate"},
	} {
		out, code := run(bad...)
		require.NotEqual(t, 0, code, "%v: %s", bad, out)
	}

	out, code = run("revoke", "1")
	require.Equal(t, 0, code, out)
	_, err = apikey.Verify(ctx, env.Pool, key)
	require.ErrorIs(t, err, apikey.ErrRevoked)
	out, code = run("list", "--json")
	require.Equal(t, 0, code, out)
	var row map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &row), out)
	require.NotNil(t, row["revoked_at"])
	require.Equal(t, "billing", row["name"])
}
