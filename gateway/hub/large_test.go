package hub

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/projection"
)

// signalled reports (and takes) a pending wake-up of s.
func signalled(s *Subscription) bool {
	select {
	case <-s.C():
		return true
	default:
		return false
	}
}

// TestReadFanoutDispatch pins what the L/M/S tokens do in the hub: an L or
// S token wakes the waiters of its conversation only, an M token the
// user's waiters and drops the user's head from the cache (an S token all
// heads), and the listeners get every token, and a Reset on an epoch.
func TestReadFanoutDispatch(t *testing.T) {
	h := New(Config{WakeJitter: -1})
	h.heads[0].reset(true)
	gen := h.heads[0].Generation()
	h.heads[0].Learn(gen, 1, 7, 10)
	h.heads[0].Learn(gen, 2, 7, 20)

	s1 := h.SubscribeUser(1)
	defer s1.Close()
	stop := h.WatchConversations(s1, []int64{100})
	s2 := h.SubscribeUser(2)
	defer s2.Close()
	var got []ReadFanout
	stopL := h.ListenReadFanout(func(rf ReadFanout) { got = append(got, rf) })

	var e projection.Encoder
	e.Large(projection.Large{Conv: 100, LastSeq: 5, Changes: 1})
	h.dispatch(0, e.Payloads()[0])
	require.True(t, signalled(s1))
	require.False(t, signalled(s2))

	e = projection.Encoder{}
	e.Large(projection.Large{Conv: 101, LastSeq: 5})
	h.dispatch(0, e.Payloads()[0])
	require.False(t, signalled(s1), "another conversation")

	e = projection.Encoder{}
	e.Member(projection.Membership{Conv: 101, User: 2, Joined: true})
	h.dispatch(0, e.Payloads()[0])
	require.True(t, signalled(s2))
	require.False(t, signalled(s1))
	_, _, ok := h.heads[0].Get(2)
	require.False(t, ok, "the user's ETag changed without its head")
	_, _, ok = h.heads[0].Get(1)
	require.True(t, ok)

	e = projection.Encoder{}
	e.Mode(projection.Mode{Conv: 100, From: 9, Read: false})
	h.dispatch(0, e.Payloads()[0])
	require.True(t, signalled(s1))
	_, _, ok = h.heads[0].Get(1)
	require.False(t, ok, "a switch forgets every head")

	stop()
	e = projection.Encoder{}
	e.Large(projection.Large{Conv: 100, LastSeq: 6})
	h.dispatch(0, e.Payloads()[0])
	require.False(t, signalled(s1), "no longer watched")

	h.dispatch(0, "e3")
	stopL()
	h.dispatch(0, e.Payloads()[0])
	require.Len(t, got, 6)
	require.Equal(t, []projection.Large{{Conv: 100, LastSeq: 5, Changes: 1}}, got[0].Large)
	require.Equal(t, []projection.Membership{{Conv: 101, User: 2, Joined: true}}, got[2].Members)
	require.Equal(t, []projection.Mode{{Conv: 100, From: 9}}, got[3].Modes)
	require.True(t, got[5].Reset)
}
