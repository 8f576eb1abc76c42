package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSettingsAndPresenceCommands runs settings and presence against
// `inboxd dev`: the settings as stored and changed, a bad value refused,
// and presence showing a partner (offline, never connected) but not a
// stranger.
func TestSettingsAndPresenceCommands(t *testing.T) {
	d := newDevInstance(t)
	d.start(t)
	require.NoError(t, d.proc.WaitOutput("partitions assigned", time.Minute))
	work := t.TempDir()
	run := d.cli(t, work)
	alice := []string{"settings", "--state", filepath.Join(work, "alice")}
	run(0, "login", "--state", filepath.Join(work, "alice"), "--user", "1")
	require.Equal(t, "hide_receipts false\nhide_presence false\nnotifications true", run(0, alice...))
	require.Equal(t, "hide_receipts false\nhide_presence true\nnotifications true", run(0, append(alice, "--hide-presence=true")...))
	require.Equal(t, "hide_receipts true\nhide_presence true\nnotifications true", run(0, append(alice, "--hide-receipts")...))
	require.Equal(t, "hide_receipts true\nhide_presence true\nnotifications false", run(0, append(alice, "--notifications=false")...))
	require.JSONEq(t, `{"hide_receipts":true,"hide_presence":true,"notifications":false}`, run(0, append(alice, "--json")...))
	require.Equal(t, "hide_receipts true\nhide_presence true\nnotifications true", run(0, append(alice, "--notifications")...))
	run(1, append(alice, "--hide-presence=maybe")...)
	run(1, append(alice, "--notifications=maybe")...)

	run(0, "create", "--state", filepath.Join(work, "alice"), "--title", "p", "2")
	presence := []string{"presence", "--state", filepath.Join(work, "alice")}
	// Nobody is connected; user 3 shares no conversation with alice.
	require.Equal(t, "user 1 offline\nuser 2 offline", run(0, append(presence, "1", "2", "3")...))
	run(1, presence...)
}
