package bench

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The fanout benchmark runs end to end at a small size and reports figures
// with their references (INBOXD_BENCH_MESSAGES raises the size).
func TestFanoutBenchSmoke(t *testing.T) {
	n := 5000
	if v, err := strconv.Atoi(os.Getenv("INBOXD_BENCH_MESSAGES")); err == nil {
		n = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	res, err := Fanout(ctx, FanoutConfig{DatabaseURL: pgtest.AdminURL(t), Messages: n, Members: 7, Conversations: 500,
		Partitions: 12, MaxPollRecords: 5000}, &progress)
	require.NoError(t, err, progress.String())
	require.True(t, res.VerifyOK)
	require.Equal(t, int64(n*7), res.InboxRows)
	require.Positive(t, res.Ratio)
	require.Positive(t, res.ReplayRatio)
	var out bytes.Buffer
	res.Print(&out)
	t.Log(progress.String())
	t.Log(out.String())
}
