package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
)

// tail explains a too-long answer as what it is: after a replay (a new
// epoch) nothing was lost and no range is "skipped"; a range is named only
// when entries really aged out, and never reversed.
func TestTooLongLine(t *testing.T) {
	replay := tooLongLine(client.TooLong{PreviousEpoch: 1, PreviousCursor: 13, Epoch: 2, Head: 12})
	require.Contains(t, replay, "rebuilt its inboxes (epoch 1 -> 2")
	require.Contains(t, replay, "nothing was lost")
	require.NotContains(t, replay, "skipped")

	aged := tooLongLine(client.TooLong{PreviousEpoch: 2, PreviousCursor: 5, Epoch: 2, Head: 900})
	require.Contains(t, aged, "skipped inbox #6..#900")

	behind := tooLongLine(client.TooLong{PreviousEpoch: 2, PreviousCursor: 13, Epoch: 2, Head: 12})
	require.NotContains(t, behind, "skipped")
	require.Contains(t, behind, "no longer keeps your inbox position #13")
}
