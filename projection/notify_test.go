package projection

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	ev1 = "0b8e2a52-7f0e-4a57-9d8e-3c1f2f7a0001"
	ev2 = "0b8e2a52-7f0e-4a57-9d8e-3c1f2f7a0002"
	msg = "7d444840-9dc0-11d1-b245-5ffdce74fad2"
)

// encode writes n the way the projector does: heads by user id, runs by
// user id, then projected, duplicates, rejections, epoch.
func encode(n Notification) []string {
	var e Encoder
	for _, u := range sortedKeys(n.Heads) {
		e.Head(u, n.Heads[u])
	}
	for _, u := range sortedKeys(n.Runs) {
		e.Run(u, n.Runs[u])
	}
	ids := make([]string, 0, len(n.Projected))
	for id := range n.Projected {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		e.Projected(id, n.Projected[id])
	}
	for _, id := range n.Duplicates {
		e.Duplicate(id)
	}
	for _, id := range n.Rejected {
		e.Rejected(id)
	}
	for _, u := range n.Updated {
		e.Updated(u.Conv, u.Seq, u.Version)
	}
	if n.Epoch != 0 {
		e.Epoch(n.Epoch)
	}
	return e.Payloads()
}

func sortedKeys[V any](m map[int64]V) []int64 {
	ks := make([]int64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

// parseAll decodes the payloads of one batch into one Notification.
func parseAll(payloads []string) Notification {
	all := Notification{Heads: map[int64]int64{}}
	for _, pl := range payloads {
		n := ParseNotification(pl)
		for u, h := range n.Heads {
			all.Heads[u] = h
		}
		for u, r := range n.Runs {
			if all.Runs == nil {
				all.Runs = map[int64]Run{}
			}
			all.Runs[u] = r
		}
		for id, s := range n.Projected {
			if all.Projected == nil {
				all.Projected = map[string]int64{}
			}
			all.Projected[id] = s
		}
		all.Duplicates = append(all.Duplicates, n.Duplicates...)
		all.Rejected = append(all.Rejected, n.Rejected...)
		all.Updated = append(all.Updated, n.Updated...)
		if n.Epoch != 0 {
			all.Epoch = n.Epoch
		}
	}
	return all
}

// TestEncoderWireFormat pins the bytes: gateways and fanouts of different
// versions read each other's payloads, so a token never changes shape.
func TestEncoderWireFormat(t *testing.T) {
	var e Encoder
	require.Nil(t, e.Payloads(), "nothing added, nothing to send")
	e.Head(1, 5)
	e.Head(22, 7)
	require.True(t, e.Run(3, Run{First: 10, Keys: [][2]int64{{4, 1}, {4, 2}, {9, 1}}}))
	e.Projected(ev1, 12)
	e.Duplicate(ev2)
	e.Rejected(msg)
	e.Updated(4, 2, 7)
	e.Epoch(1764480000000)
	require.Equal(t, []string{"h1:5 h22:7 i3:10:4.1,4.2,9.1 m" + ev1 + ":12 d" + ev2 + " r" + msg + " u4.2:7 e1764480000000"}, e.Payloads())
}

// TestRoundTrip covers every token: what the encoder writes, the parser
// reads back whole.
func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    Notification
	}{
		{"empty", Notification{Heads: map[int64]int64{}}},
		{"heads", Notification{Heads: map[int64]int64{1: 5, 22: 7, 9223372036854775807: 1}}},
		{"run", Notification{Heads: map[int64]int64{3: 12}, Runs: map[int64]Run{3: {First: 10, Keys: [][2]int64{{4, 1}, {4, 2}, {9, 1}}}}}},
		{"runs of several users", Notification{Heads: map[int64]int64{3: 10, 4: 20},
			Runs: map[int64]Run{3: {First: 10, Keys: [][2]int64{{1, 1}}}, 4: {First: 20, Keys: [][2]int64{{1, 1}}}}}},
		{"projected", Notification{Heads: map[int64]int64{}, Projected: map[string]int64{ev1: 12, ev2: 1}}},
		{"duplicates", Notification{Heads: map[int64]int64{}, Duplicates: []string{ev1, ev2}}},
		{"rejected", Notification{Heads: map[int64]int64{}, Rejected: []string{msg}}},
		{"epoch", Notification{Heads: map[int64]int64{}, Epoch: 1764480000000}},
		{"updated", Notification{Heads: map[int64]int64{}, Updated: []Updated{{4, 2, 7}, {9223372036854775807, 1, 2}}}},
		{"everything", Notification{
			Heads:      map[int64]int64{1: 5, 2: 6},
			Runs:       map[int64]Run{1: {First: 5, Keys: [][2]int64{{7, 3}}}},
			Projected:  map[string]int64{ev1: 3},
			Duplicates: []string{ev2},
			Rejected:   []string{msg},
			Updated:    []Updated{{7, 3, 2}},
			Epoch:      2,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			payloads := encode(tc.n)
			if len(payloads) == 1 {
				require.Equal(t, tc.n, ParseNotification(payloads[0]))
			}
			require.Equal(t, tc.n, parseAll(payloads))
		})
	}
}

// TestSplitting: a batch too large for one payload is cut between tokens
// into payloads under PostgreSQL's limit, none empty, which together
// carry every token in order.
func TestSplitting(t *testing.T) {
	n := Notification{Heads: map[int64]int64{}, Projected: map[string]int64{}, Runs: map[int64]Run{}}
	for u := int64(1); u <= 3000; u++ {
		n.Heads[u] = u * 1000003
		n.Projected[fmt.Sprintf("00000000-0000-4000-8000-%012d", u)] = u
		n.Rejected = append(n.Rejected, fmt.Sprintf("10000000-0000-4000-8000-%012d", u))
	}
	for u := int64(1); u <= 40; u++ {
		keys := make([][2]int64, MaxRunEntries)
		for i := range keys {
			keys[i] = [2]int64{u, int64(i) + 1}
		}
		n.Runs[u] = Run{First: u * 1000003, Keys: keys}
	}
	payloads := encode(n)
	require.Greater(t, len(payloads), 10)
	var toks []string
	for i, pl := range payloads {
		require.NotEmpty(t, pl)
		require.LessOrEqual(t, len(pl), MaxPayload, "payload %d", i)
		require.NotEqual(t, ' ', pl[0])
		require.NotEqual(t, ' ', pl[len(pl)-1])
		if i+1 < len(payloads) {
			next, _, _ := strings.Cut(payloads[i+1], " ")
			require.Greater(t, len(pl)+1+len(next), MaxPayload, "payload %d was cut before it was full", i)
		}
		toks = append(toks, strings.Fields(pl)...)
	}
	require.Len(t, toks, 3000+40+3000+3000, "every token is in exactly one payload")
	require.Equal(t, n, parseAll(payloads))
}

// TestRunLimits: runs the encoder leaves out rather than overflow a payload.
func TestRunLimits(t *testing.T) {
	keys := func(n int, conv int64) [][2]int64 {
		ks := make([][2]int64, n)
		for i := range ks {
			ks[i] = [2]int64{conv, conv + int64(i)}
		}
		return ks
	}
	for _, tc := range []struct {
		name string
		run  Run
		want bool
	}{
		{"one entry", Run{First: 1, Keys: keys(1, 1)}, true},
		{"MaxRunEntries", Run{First: 1, Keys: keys(MaxRunEntries, 1)}, true},
		{"empty", Run{First: 1}, false},
		{"over MaxRunEntries", Run{First: 1, Keys: keys(MaxRunEntries+1, 1)}, false},
		{"longer than a payload", Run{First: 1, Keys: keys(MaxRunEntries, 1<<62)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e Encoder
			require.Equal(t, tc.want, e.Run(7, tc.run))
			n := parseAll(e.Payloads())
			if tc.want {
				require.Equal(t, map[int64]Run{7: tc.run}, n.Runs)
			} else {
				require.Nil(t, e.Payloads())
			}
		})
	}
}

// TestRoundTripRandom: random batches, split or not, read back whole.
func TestRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 1))
	for i := 0; i < 200; i++ {
		n := Notification{Heads: map[int64]int64{}}
		for range rng.IntN(1500) {
			n.Heads[rng.Int64()] = rng.Int64()
		}
		for range rng.IntN(50) {
			if n.Runs == nil {
				n.Runs = map[int64]Run{}
			}
			r := Run{First: rng.Int64N(1 << 40)}
			for range 1 + rng.IntN(MaxRunEntries) {
				r.Keys = append(r.Keys, [2]int64{rng.Int64N(1 << 32), rng.Int64N(1 << 32)})
			}
			n.Runs[rng.Int64()] = r
		}
		for range rng.IntN(300) {
			if n.Projected == nil {
				n.Projected = map[string]int64{}
			}
			n.Projected[fmt.Sprintf("%016x-%d", rng.Uint64(), i)] = rng.Int64()
		}
		for range rng.IntN(100) {
			n.Duplicates = append(n.Duplicates, fmt.Sprintf("%016x", rng.Uint64()))
		}
		for range rng.IntN(100) {
			n.Rejected = append(n.Rejected, fmt.Sprintf("%016x", rng.Uint64()))
		}
		if rng.IntN(2) == 0 {
			n.Epoch = 1 + rng.Int64N(1<<50)
		}
		payloads := encode(n)
		for _, pl := range payloads {
			require.LessOrEqual(t, len(pl), MaxPayload)
		}
		require.Equal(t, n, parseAll(payloads), "batch %d", i)
	}
}

// TestParseSkips: unknown tokens (a newer writer's) and malformed ones are
// skipped; the rest of the payload is still read.
func TestParseSkips(t *testing.T) {
	n := ParseNotification("h1:5 zfuture h3:x hx:1 h4 mbad m" + ev1 + ":x i1 i1:2 i1:2: i1:2:3 i1:2:3.x i9:1:2.3,4 u1 u1.2 u1:2 u1.x:3 " +
		"ex h22:7 \t m" + ev2 + ":12")
	require.Equal(t, Notification{
		Heads:     map[int64]int64{1: 5, 22: 7},
		Projected: map[string]int64{ev2: 12},
		// i9:1:2.3,4 has one bad entry: the run is dropped whole.
	}, n)

	empty := ParseNotification("")
	require.Empty(t, empty.Heads)
	require.NotNil(t, empty.Heads)
	require.Zero(t, empty.Epoch)
}

// FuzzParseNotification: any payload parses without panicking, and what it
// yields encodes and parses back to itself.
func FuzzParseNotification(f *testing.F) {
	f.Add("h1:5 h22:7 i3:10:4.1,4.2 m" + ev1 + ":12 d" + ev2 + " r" + msg + " e1764480000000")
	f.Add("zfuture h3:x mbad i1:2:")
	f.Add("")
	f.Fuzz(func(t *testing.T, payload string) {
		n := ParseNotification(payload)
		for u, r := range n.Runs {
			if !new(Encoder).Run(u, r) {
				delete(n.Runs, u) // a reader accepts runs the encoder would leave out
			}
		}
		if len(n.Runs) == 0 {
			n.Runs = nil
		}
		require.Equal(t, n, parseAll(encode(n)))
	})
}

// The read-mode tokens (L, M, S) round-trip, and malformed ones are
// skipped without touching the rest.
func TestLargeTokens(t *testing.T) {
	var e Encoder
	e.Head(7, 3)
	e.Large(Large{Conv: 9, LastSeq: 120, Changes: 4})
	e.Member(Membership{Conv: 9, User: 7, Joined: true})
	e.Member(Membership{Conv: 9, User: 8})
	e.Mode(Mode{Conv: 9, From: 101, Read: true})
	p := e.Payloads()
	require.Equal(t, []string{"h7:3 L9:120:4 M9:7:1 M9:8:0 S9:101:1"}, p)
	n := ParseNotification(p[0] + " L9:1 Mx:1:1 S1:2:3:4 L")
	require.Equal(t, map[int64]int64{7: 3}, n.Heads)
	require.Equal(t, []Large{{Conv: 9, LastSeq: 120, Changes: 4}}, n.Large)
	require.Equal(t, []Membership{{Conv: 9, User: 7, Joined: true}, {Conv: 9, User: 8}}, n.Members)
	require.Equal(t, []Mode{{Conv: 9, From: 101, Read: true}}, n.Modes)
}
