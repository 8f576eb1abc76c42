package projection

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEphemeralRoundTrip(t *testing.T) {
	for i := 0; i < 500; i++ {
		var want Ephemeral
		var b []byte
		for j := rand.IntN(5); j >= 0; j-- {
			if rand.IntN(2) == 0 {
				tp := Typing{Conv: 1 + rand.Int64N(1<<62), User: 1 + rand.Int64N(1<<62), ExpiresMS: rand.Int64N(10000)}
				want.Typing = append(want.Typing, tp)
				b = AppendTyping(b, tp)
			} else {
				p := Presence{User: 1 + rand.Int64N(1<<62), Online: rand.IntN(2) == 0, LastSeen: rand.Int64N(1 << 45)}
				want.Presence = append(want.Presence, p)
				b = AppendPresence(b, p)
			}
		}
		require.Less(t, len(b), MaxPayload)
		require.Equal(t, want, ParseEphemeral(string(b)), "%s", b)
	}
}

func TestEphemeralParseSkips(t *testing.T) {
	for _, bad := range []string{"", " ", "t", "t1", "t1:2", "t0:2:3", "t1:0:3", "t1:2:-1", "p1:2:0",
		"p-1:1:0", "px:1:0", "t1:2:3:4", "q1:2:3", "t1:2:99999999999999999999", "p1:1:-5"} {
		require.Empty(t, ParseEphemeral(bad).Typing, "%q", bad)
		require.Empty(t, ParseEphemeral(bad).Presence, "%q", bad)
	}
	e := ParseEphemeral("x1 t5:6:6000 junk p7:0:123 t5:6:0")
	require.Equal(t, []Typing{{Conv: 5, User: 6, ExpiresMS: 6000}, {Conv: 5, User: 6}}, e.Typing)
	require.Equal(t, []Presence{{User: 7, LastSeen: 123}}, e.Presence)
}

func FuzzParseEphemeral(f *testing.F) {
	f.Add("t1:2:6000 p3:1:0")
	f.Add("p9:0:1700000000000")
	f.Add("t:: p::")
	f.Fuzz(func(t *testing.T, payload string) {
		e := ParseEphemeral(payload)
		// What parsed encodes to tokens that parse to the same.
		var b []byte
		for _, tp := range e.Typing {
			require.Positive(t, tp.Conv)
			require.Positive(t, tp.User)
			b = AppendTyping(b, tp)
		}
		for _, p := range e.Presence {
			require.Positive(t, p.User)
			b = AppendPresence(b, p)
		}
		again := ParseEphemeral(string(b))
		require.Equal(t, len(e.Typing), len(again.Typing))
		require.Equal(t, len(e.Presence), len(again.Presence))
		for i := range e.Typing {
			require.Equal(t, e.Typing[i], again.Typing[i])
		}
		for i := range e.Presence {
			require.Equal(t, e.Presence[i], again.Presence[i])
		}
	})
}
