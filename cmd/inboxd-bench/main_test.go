package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/bench"
)

// Every figure binds its flags next to the common ones without a clash and
// answers -h before it starts anything.
func TestFiguresHelp(t *testing.T) {
	for name := range figures {
		t.Run(name, func(t *testing.T) {
			err := run(context.Background(), []string{name, "-h"})
			require.ErrorIs(t, err, flag.ErrHelp)
		})
	}
	require.ErrorIs(t, run(context.Background(), []string{"report", "-h"}), flag.ErrHelp)
}

func TestRunRefuses(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown figure", []string{"nope"}, `unknown figure "nope"`},
		{"report without its input", []string{"report"}, "--from is required"},
		{"malformed flag", []string{"fanout", "--messages", "x"}, "invalid value"},
		{"unknown worker", []string{"worker", "nope", "{}"}, `unknown worker "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorContains(t, run(context.Background(), tt.args), tt.want)
		})
	}
	require.ErrorIs(t, run(context.Background(), nil), errUsage)
}

func TestParseFloats(t *testing.T) {
	tests := []struct {
		in   string
		want []float64
		err  bool
	}{
		{"100,1000", []float64{100, 1000}, false},
		{" 50 , ,2.5", []float64{50, 2.5}, false},
		{"", nil, true},
		{"10,-1", nil, true},
		{"10,x", nil, true},
	}
	for _, tt := range tests {
		got, err := parseFloats(tt.in)
		if tt.err {
			require.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got, tt.in)
	}
}

// report takes several runs, repeated or comma-separated, and writes the
// ranges over them into the report's generated block.
func TestReportOfSeveralRuns(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i, rows := range []float64{100000, 120000, 90000} {
		raw, err := json.Marshal(bench.AllResult{Fanout50: &bench.FanoutResult{Members: 50, RowsPerSec: rows, CopyRowsPerSec: 400000}})
		require.NoError(t, err)
		p := filepath.Join(dir, fmt.Sprintf("run%d.json", i+1))
		require.NoError(t, os.WriteFile(p, raw, 0o644))
		paths = append(paths, p)
	}
	doc := filepath.Join(dir, "benchmarks.md")
	require.NoError(t, os.WriteFile(doc, []byte("<!-- bench:begin -->\n<!-- bench:end -->\n<!-- bench:profiles:begin -->\n<!-- bench:profiles:end -->\n"), 0o644))
	require.NoError(t, run(context.Background(), []string{"report", "--from", paths[0], "--from", paths[1] + "," + paths[2], "--docs", doc, "--images", ""}))
	raw, err := os.ReadFile(doc)
	require.NoError(t, err)
	require.Contains(t, string(raw), "#### Ranges over 3 runs")
	require.Contains(t, string(raw), "| fan-out, 50 members: committed inbox rows/s | 100,000 rows/s | 120,000 rows/s | 90,000 rows/s |")
}
