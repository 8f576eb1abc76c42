package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The server binary links none of the benchmark harness (cmd/inboxd-bench):
// no load generators, no pixel font, no PNG renderer.
func TestServerLinksNoBench(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, pkg := range strings.Fields(string(out)) {
		require.NotEqual(t, "github.com/inboxd/inboxd/internal/bench", pkg)
		require.NotEqual(t, "image/png", pkg, "the bench's chart renderer")
	}
}
