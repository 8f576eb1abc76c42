package notifier

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The retries of a notification span the outage the docs promise: 12
// attempts wait ~1 s, 2 s, 4 s ... up to 5 min (±50 %): 18.5 minutes in
// all on average, at least half of it, so a receiver down for minutes
// loses nothing.
func TestRetryDelays(t *testing.T) {
	var total time.Duration
	for a := 1; a < DefaultMaxAttempts; a++ {
		d := retryDelay(a, 0)
		base := min(time.Second<<(a-1), 5*time.Minute) // 1 s, 2 s, 4 s, ... 5 min
		require.GreaterOrEqual(t, d, base/2, "attempt %d", a)
		require.LessOrEqual(t, d, base*3/2, "attempt %d", a)
		total += d
	}
	require.Greater(t, total, 1111*time.Second/2) // 1+2+...+256 s, then 300 s twice
	require.Equal(t, 10*time.Minute, retryDelay(1, 10*time.Minute), "a longer Retry-After wins")
}
