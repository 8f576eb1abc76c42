package projector

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
)

// TestBlockRules: user-level events touch no conversation, inbox or
// rejection; each pair ends as its last event left it, with the time of
// the block that set it and a delete first when the batch unblocked it.
func TestBlockRules(t *testing.T) {
	block := func(typ, id string, blocker, blocked int64, sec int) *events.Event {
		e := ev(typ, id, 0, blocker)
		e.UserID, e.At = blocked, at.Add(secs(sec))
		return e
	}
	b := runRules(t, state{convs: map[int64]conv{1: {last: 1, members: []int64{1, 2}}}}, []any{
		block(events.UserBlocked, "b1", 1, 2, 1),
		block(events.UserBlocked, "b2", 1, 2, 2), // again: keeps 1
		block(events.UserBlocked, "b3", 1, 3, 1),
		block(events.UserUnblocked, "u1", 1, 3, 3),
		block(events.UserUnblocked, "u2", 2, 1, 1), // never blocked
		block(events.UserBlocked, "b4", 2, 3, 1),
		block(events.UserUnblocked, "u3", 2, 3, 2),
		block(events.UserBlocked, "b5", 2, 3, 4), // blocked anew at 4
		sent("e1", "m1", 1, 2, "still delivered"),
		dead{block(events.UserBlocked, "b6", 3, 1, 1)},
	})
	require.Equal(t, map[blockKey]blockState{
		{1, 2}: {blocked: true, at: at.Add(secs(1))},
		{1, 3}: {reset: true},
		{2, 1}: {reset: true},
		{2, 3}: {blocked: true, reset: true, at: at.Add(secs(4))},
	}, func() map[blockKey]blockState {
		out := map[blockKey]blockState{}
		for k, s := range b.blocks {
			out[k] = *s
		}
		return out
	}())
	_, ok := b.convs[0]
	require.False(t, ok, "no conversation 0 is loaded or made")
	require.Len(t, b.msgs, 1, "the conversation's message is projected as always")
	require.Len(t, b.rejects, 1, "only the dead-lettered record is a rejection")
	require.Equal(t, "b6", b.rejects[0].eventID)
}

func secs(n int) time.Duration { return time.Duration(n) * time.Second }
