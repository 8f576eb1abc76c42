package main

import (
	"context"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"
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
