package apikey

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	secret, _, err := newSecret()
	require.NoError(t, err)
	id, s, err := Parse(format(42, secret))
	require.NoError(t, err)
	require.Equal(t, int64(42), id)
	require.Equal(t, secret, s)

	for name, raw := range map[string]string{
		"empty":          "",
		"a JWT":          "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
		"no prefix":      "42_" + secret,
		"no id":          "ik__" + secret,
		"id zero":        "ik_0_" + secret,
		"id with a sign": "ik_+42_" + secret,
		"leading zero":   "ik_042_" + secret,
		"short secret":   "ik_42_" + secret[1:],
		"long secret":    "ik_42_" + secret + "A",
		"not base64url":  "ik_42_" + strings.Repeat("!", len(secret)),
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := Parse(raw)
			require.ErrorIs(t, err, ErrInvalid)
		})
	}
}

func TestCheckScopesAndName(t *testing.T) {
	require.NoError(t, CheckScopes([]string{ScopeRead, ScopeMessages}))
	for _, bad := range [][]string{nil, {"admin"}, {ScopeRead, ScopeRead}} {
		require.Error(t, CheckScopes(bad), "%v", bad)
	}
	require.NoError(t, CheckName("billing-service"))
	for _, bad := range []string{"", "a b", "a:b", strings.Repeat("x", MaxName+1), "é"} {
		require.Error(t, CheckName(bad), "%q", bad)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("ik_1_" + strings.Repeat("A", secretLen))
	f.Add("ik_")
	f.Fuzz(func(t *testing.T, raw string) {
		id, secret, err := Parse(raw)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			return
		}
		require.Equal(t, raw, format(id, secret), "a parsed key formats back to itself")
	})
}
