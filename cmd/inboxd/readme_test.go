package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
)

// walkthroughStep is one "$ command" of the README's walkthrough and the
// lines it must print ("..." matches anything within a line).
type walkthroughStep struct {
	cmd  string
	want []string
}

// readmeWalkthrough reads the console blocks of the README section that
// the walkthrough marker opens, up to the next heading.
func readmeWalkthrough(t *testing.T) []walkthroughStep {
	raw, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	s := string(raw)
	i := strings.Index(s, "<!-- walkthrough:")
	require.GreaterOrEqual(t, i, 0, "README.md has the walkthrough marker")
	s = s[i:]
	if j := strings.Index(s, "\n#"); j >= 0 {
		s = s[:j]
	}
	var steps []walkthroughStep
	inBlock := false
	for _, line := range strings.Split(s, "\n") {
		switch {
		case line == "```console":
			inBlock = true
		case line == "```":
			inBlock = false
		case inBlock && strings.HasPrefix(line, "$ "):
			steps = append(steps, walkthroughStep{cmd: line[2:]})
		case inBlock:
			require.NotEmpty(t, steps, "output before the first command")
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	require.NotEmpty(t, steps)
	return steps
}

// TestReadmeWalkthrough runs the README's walkthrough as written, in one
// shell, against a fresh `inboxd dev`: bin/inboxd is this build, the home
// directory is empty, and the dev instance's address stands in for
// http://127.0.0.1:8080 (INBOXD_URL, and in the printed lines).
func TestReadmeWalkthrough(t *testing.T) {
	steps := readmeWalkthrough(t)
	d := newDevInstance(t)
	d.start(t)
	require.NoError(t, d.proc.WaitOutput("partitions assigned", time.Minute))

	work := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(work, "bin"), 0o755))
	require.NoError(t, os.Symlink(testenv.Binary(t), filepath.Join(work, "bin", "inboxd")))
	var script strings.Builder
	script.WriteString("cd " + work + "\n")
	for i, st := range steps {
		fmt.Fprintf(&script, "echo '@@step %d'\n%s 2>&1 || echo \"@@failed $?\"\n", i, st.cmd)
	}
	cmd := exec.Command("bash", "-c", script.String())
	cmd.Env = append(os.Environ(), "HOME="+work, "XDG_CONFIG_HOME="+filepath.Join(work, ".config"),
		"INBOXD_URL="+d.url(), "INBOXD_STATE=", "INBOXD_TOKEN=", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	got := strings.ReplaceAll(string(out), d.url(), "http://127.0.0.1:8080")

	parts := strings.Split(got, "@@step ")[1:]
	require.Len(t, parts, len(steps), got)
	for i, st := range steps {
		lines := strings.Split(strings.TrimRight(parts[i], "\n"), "\n")[1:]
		require.Len(t, lines, len(st.want), "$ %s\nprinted:\n%s", st.cmd, strings.Join(lines, "\n"))
		for j, w := range st.want {
			require.Regexp(t, wildcard(w), lines[j], "$ %s: line %d", st.cmd, j+1)
		}
	}
}

// wildcard turns an expected line into an anchored pattern where "..."
// matches anything.
func wildcard(line string) *regexp.Regexp {
	parts := strings.Split(line, "...")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}
