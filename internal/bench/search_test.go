package bench

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The search figure at a tiny size: the data is seeded, every kind of
// query is answered through the gateway with its matches, the references
// are timed, the index has a size, and the write cost is measured in both
// databases. A check that the figure works, not a measurement.
func TestBenchSearchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gateway and two fanouts")
	}
	env, progress := testEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Search(ctx, env, SearchConfig{Messages: 3000, Conversations: 60, Members: 4, MemberOf: 10,
		Vocabulary: 400, CJKShare: 0.1, Requests: 5, WriteMessages: 1500, WriteConversations: 20, WriteRounds: 2,
		MaxPollRecords: 500})
	require.NoError(t, err, progress.String())

	require.Equal(t, int64(3000), res.Data.Messages)
	require.Equal(t, 10, res.TargetConversations)
	require.Equal(t, int64(500), res.TargetMessages)
	require.Len(t, res.Kinds, 9)
	for _, k := range append(res.Kinds, res.History, res.PrimaryKey) {
		require.Zero(t, k.Errors, "%s: %s", k.Name, k.FirstErr)
		require.Equal(t, 5, k.Latency.N, k.Name)
		require.Positive(t, k.Latency.P50, k.Name)
	}
	byName := map[string]SearchKind{}
	for _, k := range res.Kinds {
		byName[k.Name] = k
	}
	// The common words, the phrase of the commonest, the prefixes and
	// the Chinese words are in the target's conversations at this size.
	for _, name := range []string{"a common word, ranks 11-20", "a phrase of two of the 11 commonest words",
		"a prefix of 2 letters", "a prefix of 3 letters", "CJK, a 2-character Chinese word"} {
		k := byName[name]
		require.Positive(t, k.MeanResults, name)
		require.Positive(t, k.MeanEstimated, name)
		require.Positive(t, k.TableMatches, name)
	}
	require.Greater(t, byName["a common word, ranks 11-20"].TableMatches, res.Kinds[1].TableMatches, "the rare word")
	require.Positive(t, res.IndexBytes)
	require.Positive(t, res.HeapBytes)
	require.Positive(t, res.VectorBytes)
	require.Positive(t, res.BodyBytes)
	require.Positive(t, res.Seed.SearchSeconds)

	w := res.Write
	require.NotNil(t, w)
	require.Len(t, w.With, 2)
	require.Len(t, w.Without, 2)
	require.Len(t, w.ColumnOnly, 2)
	for _, r := range slices.Concat(w.With, w.Without, w.ColumnOnly) {
		require.Equal(t, 1500, r.Messages)
		require.Positive(t, r.Seconds)
		require.Positive(t, r.ApplySeconds)
		require.GreaterOrEqual(t, r.Batches, uint64(3), "a backlog of 1,500 in batches of at most 500")
	}

	rows := res.Rows()
	require.Len(t, rows, 9+1+3+3)
	for _, row := range rows {
		require.NotEmpty(t, row.Value, row.Figure)
		require.NotEmpty(t, row.Reference, row.Figure)
		require.NotEmpty(t, row.Ratio, row.Figure)
		require.NotContains(t, row.Ratio, "n/a", row.Figure)
	}
	var out bytes.Buffer
	WriteTable(&out, rows)
	t.Log("\n" + out.String())
}

// The text has a head and a tail: the commonest words are in many
// messages, the rare ones in few; a share is CJK; the same seed gives the
// same text.
func TestSearchText(t *testing.T) {
	vocab := searchVocabulary(5000)
	require.Len(t, vocab, 5000)
	seen := map[string]bool{}
	for _, w := range vocab {
		require.False(t, seen[w], w)
		seen[w] = true
	}
	g := newTextGen(vocab, 0.05, 1)
	count := map[string]int{}
	cjk := 0
	const n = 20000
	var first []string
	for i := 0; i < n; i++ {
		b := g.body()
		if i < 5 {
			first = append(first, b)
		}
		if strings.IndexFunc(b, isCJKRune) >= 0 {
			cjk++
			continue
		}
		for _, w := range strings.FieldsFunc(b, func(r rune) bool { return strings.ContainsRune(" ,.?!", r) }) {
			count[w]++
		}
	}
	require.InDelta(t, 0.05, float64(cjk)/n, 0.01)
	require.Greater(t, count[vocab[0]], n/2, "the commonest word is in most messages")
	require.Greater(t, count[vocab[10]], 20*count[vocab[3000]]+1)
	g2 := newTextGen(vocab, 0.05, 1)
	for _, b := range first {
		require.Equal(t, b, g2.body())
	}
}

func isCJKRune(r rune) bool { return r >= 0x3040 && r <= 0xd7af }
