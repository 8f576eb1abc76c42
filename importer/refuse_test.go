package importer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRefusedLines checks that each bad line is refused with its number
// and why, that the other lines of the file are still checked, and that a
// refused file writes nothing (no database is given: the check comes
// first).
func TestRefusedLines(t *testing.T) {
	const conv = `{"kind":"conversation","id":"c1","title":"t","members":[1,2],"created_at":"2022-01-01T00:00:00Z"}`
	const msg = `{"kind":"message","conversation":"c1","id":"m1","sender":1,"body":"hi","sent_at":"2022-01-01T00:01:00Z"}`
	cases := []struct {
		name, line, reason string
	}{
		{"not JSON", `{"kind":`, "not a JSON line"},
		{"unknown field", `{"kind":"message","conversation":"c1","id":"m9","sender":1,"body":"hi","sent_at":"2022-01-01T00:01:00Z","bdy":"x"}`, "unknown field"},
		{"unknown kind", `{"kind":"reaction"}`, `unknown kind "reaction"`},
		{"missing kind", `{"id":"x"}`, "missing kind"},
		{"conversation twice", conv, `conversation "c1" defined twice`},
		{"conversation without members", `{"kind":"conversation","id":"c2","created_at":"2022-01-01T00:00:00Z"}`, "needs members"},
		{"conversation without time", `{"kind":"conversation","id":"c3","members":[1]}`, "missing created_at"},
		{"unknown conversation", `{"kind":"message","conversation":"nope","id":"m2","sender":1,"body":"x","sent_at":"2022-01-01T00:02:00Z"}`, "not defined on an earlier line"},
		{"message twice", msg, `message "m1" of "c1" appears twice`},
		{"sender not a member", `{"kind":"message","conversation":"c1","id":"m3","sender":9,"body":"x","sent_at":"2022-01-01T00:02:00Z"}`, "sender 9 is not a member"},
		{"empty body", `{"kind":"message","conversation":"c1","id":"m4","sender":1,"body":"","sent_at":"2022-01-01T00:02:00Z"}`, "missing body"},
		{"NUL in body", `{"kind":"message","conversation":"c1","id":"m5","sender":1,"body":"a\u0000b","sent_at":"2022-01-01T00:02:00Z"}`, "NUL"},
		{"body too long", `{"kind":"message","conversation":"c1","id":"m6","sender":1,"body":"` + strings.Repeat("x", 5000) + `","sent_at":"2022-01-01T00:02:00Z"}`, "body over 4096 bytes"},
		{"out of order", `{"kind":"message","conversation":"c1","id":"m7","sender":1,"body":"x","sent_at":"2021-01-01T00:00:00Z"}`, "history must be in order"},
		{"in the future", `{"kind":"message","conversation":"c1","id":"m8","sender":1,"body":"x","sent_at":"2999-01-01T00:00:00Z"}`, "in the future"},
		{"member twice", `{"kind":"member","conversation":"c1","user_id":2,"joined_at":"2022-01-01T00:02:00Z"}`, "already a member"},
		{"adder not a member", `{"kind":"member","conversation":"c1","user_id":3,"added_by":8,"joined_at":"2022-01-01T00:02:00Z"}`, "added_by 8 is not a member"},
		{"fields of another kind", `{"kind":"member","conversation":"c1","user_id":4,"body":"x","joined_at":"2022-01-01T00:02:00Z"}`, "fields of another kind"},
	}
	lines := []string{conv, msg, ""} // line 3 is blank: no data, not refused
	for _, c := range cases {
		lines = append(lines, c.line)
	}
	lines = append(lines, `{"kind":"message","conversation":"c1","id":"ok","sender":2,"body":"fine","sent_at":"2022-01-01T00:03:00Z"}`)
	path := filepath.Join(t.TempDir(), "bad.ndjson")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))

	_, err := Run(t.Context(), Config{File: path}, nil, nil)
	require.True(t, errors.Is(err, ErrRefused), "%v", err)
	var refused *RefusedError
	require.True(t, errors.As(err, &refused))
	require.Len(t, refused.Lines, len(cases), "%v", err)
	for i, c := range cases {
		got := refused.Lines[i]
		require.Equal(t, int64(4+i), got.Line, c.name)
		require.Contains(t, got.Reason, c.reason, c.name)
	}

	// The same file without its bad lines is accepted.
	good := filepath.Join(t.TempDir(), "good.ndjson")
	require.NoError(t, os.WriteFile(good, []byte(strings.Join([]string{conv, msg, lines[len(lines)-1]}, "\n")), 0o600))
	res, err := Run(t.Context(), Config{File: good, CheckOnly: true}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Messages)

	// MaxErrors stops the reading.
	_, err = Run(t.Context(), Config{File: path, MaxErrors: 2}, nil, nil)
	require.ErrorContains(t, err, "stopped reading after 2 refused lines")
}
