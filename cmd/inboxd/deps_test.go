package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The server binary links none of the benchmark harness (cmd/inboxd-bench):
// no load generators, no pixel font, no chart renderer. (It decodes
// PNG, JPEG, GIF and WebP for the thumbnails of attached images.)
func TestServerLinksNoBench(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, pkg := range strings.Fields(string(out)) {
		require.NotEqual(t, "github.com/inboxd/inboxd/internal/bench", pkg)
		require.NotEqual(t, "github.com/inboxd/inboxd/internal/bench/chart", pkg, "the bench's chart renderer")
	}
}

// The layers of docs/architecture.md, held on what every package links
// (its transitive imports, tests excluded): the gateway and its packages
// link neither the write engine (projector) nor the demo page (web); the
// gateway's packages never reach up to its root, and hub, inbox, write and
// the internal ones not across to ws; only the root links the write path,
// which links neither the ephemeral side nor the server API's keys; the
// Go SDK links only the protocol (with the sealed format of attachments).
func TestLayers(t *testing.T) {
	const mod = "github.com/inboxd/inboxd/"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}",
		mod+"gateway/...", mod+"client").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		deps[f[0]] = f[1:]
	}
	for _, pkg := range []string{"gateway", "gateway/hub", "gateway/inbox", "gateway/ws", "gateway/write"} {
		require.Contains(t, deps, mod+pkg, "go list did not list %s", pkg)
	}
	for pkg, ds := range deps {
		for _, d := range ds {
			if !strings.HasPrefix(d, mod) {
				continue
			}
			p, dep := strings.TrimPrefix(pkg, mod), strings.TrimPrefix(d, mod)
			switch {
			case p == "client":
				require.True(t, dep == "protocol" || strings.HasPrefix(dep, "protocol/"), "client links only protocol, not %s", dep)
			case dep == "projector" || dep == "web":
				t.Errorf("%s links %s", p, dep)
			case p != "gateway" && dep == "gateway":
				t.Errorf("%s reaches up to its composition root, gateway", p)
			case p != "gateway" && p != "gateway/ws" && dep == "gateway/ws":
				t.Errorf("%s links the WebSocket server", p)
			case p != "gateway" && p != "gateway/write" && dep == "gateway/write":
				t.Errorf("%s links the write path: only the root wires it", p)
			case p == "gateway/write" && (dep == "gateway/ephemeral" || dep == "gateway/apikey"):
				t.Errorf("gateway/write links %s: the write path knows no transport and no caller", dep)
			case strings.HasPrefix(p, "gateway/internal/") && strings.HasPrefix(dep, "gateway/") &&
				!strings.HasPrefix(dep, "gateway/internal/"):
				t.Errorf("%s, a shared lower package, links %s", p, dep)
			case p == "gateway/hub" && strings.HasPrefix(dep, "gateway/"):
				t.Errorf("gateway/hub links %s", dep)
			}
		}
	}
}
