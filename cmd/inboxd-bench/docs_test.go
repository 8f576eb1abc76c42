package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/benchmarks.md gives each figure the one command that produces it:
// every inboxd-bench command it names is a figure of this binary (or one
// of its other commands), and every Go benchmark it names exists in the
// package the command runs, so that a renamed or removed figure fails
// here rather than in a reader's shell.
func TestBenchmarksDocCommands(t *testing.T) {
	raw, err := os.ReadFile("../../docs/benchmarks.md")
	require.NoError(t, err)
	doc := string(raw)
	others := map[string]bool{"report": true, "serve": true, "worker": true}
	for _, m := range regexp.MustCompile(`inboxd-bench ([a-z][a-z0-9]*)`).FindAllStringSubmatch(doc, -1) {
		_, ok := figures[m[1]]
		require.True(t, ok || others[m[1]], "docs/benchmarks.md names `inboxd-bench %s`, no such figure", m[1])
	}
	benches := regexp.MustCompile(`go test (\./[a-z/]+) -run '\^\$' -bench '?(Benchmark[A-Za-z0-9]+)`).FindAllStringSubmatch(doc, -1)
	require.NotEmpty(t, benches, "docs/benchmarks.md names no Go benchmark")
	for _, m := range benches {
		files, err := filepath.Glob(filepath.Join("../..", m[1], "*_test.go"))
		require.NoError(t, err)
		found := false
		for _, f := range files {
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			found = found || strings.Contains(string(src), "func "+m[2]+"(b *testing.B)")
		}
		require.True(t, found, "docs/benchmarks.md names %s in %s, no such benchmark", m[2], m[1])
	}
	require.NotRegexp(t, `(?i)\bissue \d`, doc, "docs/benchmarks.md names a tracker number")
}
