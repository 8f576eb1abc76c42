package projector

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseNotification(t *testing.T) {
	n := ParseNotification("h1:5 h22:7 m0b8e2a52-7f0e-4a57-9d8e-3c1f2f7a0001:12 d0b8e2a52-7f0e-4a57-9d8e-3c1f2f7a0002 " +
		"r7d444840-9dc0-11d1-b245-5ffdce74fad2 " + EpochToken(1764480000000) + " zfuture h3:x mbad")
	require.Equal(t, map[int64]int64{1: 5, 22: 7}, n.Heads)
	require.Equal(t, map[string]int64{"0b8e2a52-7f0e-4a57-9d8e-3c1f2f7a0001": 12}, n.Projected)
	require.Equal(t, []string{"0b8e2a52-7f0e-4a57-9d8e-3c1f2f7a0002"}, n.Duplicates)
	require.Equal(t, []string{"7d444840-9dc0-11d1-b245-5ffdce74fad2"}, n.Rejected)
	require.EqualValues(t, 1764480000000, n.Epoch)

	empty := ParseNotification("")
	require.Empty(t, empty.Heads)
	require.Zero(t, empty.Epoch)
}
