package fanout

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A broker outage makes every poll return the same fetch errors: a key is
// logged once per interval, with the count of what was left out, and other
// keys are not held back by it.
func TestRateLog(t *testing.T) {
	var buf bytes.Buffer
	r := newRateLog(slog.New(slog.NewTextHandler(&buf, nil)), 200*time.Millisecond)
	for i := 0; i < 10000; i++ {
		r.Warn("p0/UNKNOWN_TOPIC_ID", "fetch error", "partition", 0)
	}
	r.Warn("p1/UNKNOWN_TOPIC_ID", "fetch error", "partition", 1)
	require.Equal(t, 2, strings.Count(buf.String(), "fetch error"), buf.String())
	time.Sleep(250 * time.Millisecond)
	r.Warn("p0/UNKNOWN_TOPIC_ID", "fetch error", "partition", 0)
	require.Equal(t, 3, strings.Count(buf.String(), "fetch error"))
	require.Contains(t, buf.String(), "repeated_since_last_line=9999")
}
