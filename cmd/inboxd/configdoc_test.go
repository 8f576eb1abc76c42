package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md from the binary's flags")

var usageLine = regexp.MustCompile(`^  --([a-z0-9-]+) \(([A-Z0-9_]+), default (.*)\)$`)

type flagDoc struct{ name, env, def, usage string }

// flagsOf runs `inboxd <cmd> -h` and parses the flags it prints.
func flagsOf(t *testing.T, cmd string) []flagDoc {
	t.Helper()
	out, err := exec.Command(testenv.Binary(t), cmd, "-h").CombinedOutput()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(string(out), "\n")
	var docs []flagDoc
	for i, l := range lines {
		m := usageLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		d := flagDoc{name: m[1], env: m[2], def: m[3]}
		if i+1 < len(lines) {
			d.usage = strings.TrimSpace(lines[i+1])
		}
		docs = append(docs, d)
	}
	return docs
}

func commandNames() []string {
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Every flag of every command has an environment twin and a row in
// docs/configuration.md (regenerate with go test ./cmd/inboxd -run ConfigDoc -update).
func TestConfigDoc(t *testing.T) {
	var sb strings.Builder
	sb.WriteString("# Configuration\n\n")
	sb.WriteString("Every setting is a flag and an environment variable: `--some-flag` is `INBOXD_SOME_FLAG`\n")
	sb.WriteString("(`--database-url` is `DATABASE_URL`). A flag on the command line wins over the\n")
	sb.WriteString("environment, which wins over the default. Invalid values stop the process at start-up\n")
	sb.WriteString("with a message that names the setting.\n\n")
	sb.WriteString("This file is generated from the binary (`go test ./cmd/inboxd -run TestConfigDoc -update`)\n")
	sb.WriteString("and a test fails when it differs from the flags.\n")
	for _, cmd := range commandNames() {
		docs := flagsOf(t, cmd)
		require.NotEmpty(t, docs, "inboxd %s -h lists its flags", cmd)
		fmt.Fprintf(&sb, "\n## inboxd %s\n\n| flag | environment | default | meaning |\n|---|---|---|---|\n", cmd)
		for _, d := range docs {
			require.Equal(t, config.EnvName(d.name), d.env, "flag --%s has its env twin", d.name)
			fmt.Fprintf(&sb, "| `--%s` | `%s` | `%s` | %s |\n", d.name, d.env, strings.ReplaceAll(d.def, "|", `\|`), strings.ReplaceAll(d.usage, "|", `\|`))
		}
	}
	path := "../../docs/configuration.md"
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(sb.String()), 0o644))
		return
	}
	have, err := os.ReadFile(path)
	require.NoError(t, err, "docs/configuration.md is missing: run go test ./cmd/inboxd -run TestConfigDoc -update")
	require.Equal(t, sb.String(), string(have), "docs/configuration.md is out of date: run go test ./cmd/inboxd -run TestConfigDoc -update")
}

// Environment values reach the flags, and malformed ones are start-up errors
// that name the variable.
func TestEnvTwins(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	n := fs.Int("max-poll-records", 1, "")
	d := fs.String("database-url", "", "")
	t.Setenv("INBOXD_MAX_POLL_RECORDS", "77")
	t.Setenv("DATABASE_URL", "postgres://x")
	require.NoError(t, config.Parse(fs, nil))
	require.Equal(t, 77, *n)
	require.Equal(t, "postgres://x", *d)

	fs = flag.NewFlagSet("x", flag.ContinueOnError)
	n = fs.Int("max-poll-records", 1, "")
	require.NoError(t, config.Parse(fs, []string{"--max-poll-records", "5"}))
	require.Equal(t, 5, *n, "the command line wins over the environment")

	fs = flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Int("max-poll-records", 1, "")
	t.Setenv("INBOXD_MAX_POLL_RECORDS", "lots")
	err := config.Parse(fs, nil)
	require.ErrorContains(t, err, "INBOXD_MAX_POLL_RECORDS")
}
