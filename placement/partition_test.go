package placement_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/placement"
)

// A conversation's partition is the one the producer's partitioner puts
// its events in, and a user's is computed the same way from the decimal
// id: the reference is franz-go's own partitioner, which the producer
// uses, on the producer's own key.
func TestPartitionIsTheProducers(t *testing.T) {
	for _, n := range []int32{1, 2, 3, 6, 12, 64} {
		part := kgo.StickyKeyPartitioner(nil).ForTopic("inboxd.events")
		used := map[int32]bool{}
		for id := int64(0); id < 2000; id++ {
			want := int32(part.Partition(&kgo.Record{Key: events.Key(id)}, int(n)))
			require.Equal(t, want, placement.OfConversation(id, n), "conversation %d of %d partitions", id, n)
			userKey := []byte(strconv.FormatInt(id*7919, 10))
			require.Equal(t, int32(part.Partition(&kgo.Record{Key: userKey}, int(n))), placement.OfUser(id*7919, n),
				"user %d of %d partitions", id*7919, n)
			used[want] = true
		}
		require.Len(t, used, int(n), "2000 ids spread over every one of %d partitions", n)
	}
	for _, key := range []string{"", "a", "ab", "abc", "abcd", "abcde", "-1", "9223372036854775807"} {
		part := kgo.StickyKeyPartitioner(nil).ForTopic("t")
		require.Equal(t, int32(part.Partition(&kgo.Record{Key: []byte(key)}, 7)), placement.Partition([]byte(key), 7), "key %q", key)
	}
}

func TestSingleMap(t *testing.T) {
	m := placement.Single()
	require.False(t, m.Sharded())
	require.Equal(t, placement.Catalog, m.Server(5))
	require.Equal(t, placement.Assignment{Partition: 5, Server: 1, State: placement.Serving}, m.Assignment(5))
	require.Equal(t, []int32{0, 1, 2}, m.Partitions(1, 3))
	require.Empty(t, m.Partitions(2, 3))
	s, ok := m.ServerByID(1)
	require.True(t, ok)
	require.Equal(t, "server-1", s.Name)
	_, ok = m.ServerByID(2)
	require.False(t, ok)
}

// A moving partition is served nowhere: its users are remote to both its
// server and its target, and every other partition is served where it is.
func TestServesAndMoving(t *testing.T) {
	m := placement.NewMap(3, []placement.Server{{ID: 1}, {ID: 2}},
		placement.Assignment{Partition: 1, Server: 2},
		placement.Assignment{Partition: 2, Server: 1, State: placement.Moving, Target: 2})
	require.True(t, m.Serves(0, 1))
	require.True(t, m.Serves(1, 2))
	require.False(t, m.Serves(1, 1))
	require.False(t, m.Serves(2, 1), "moving: not served by its server")
	require.False(t, m.Serves(2, 2), "moving: not served by its target")
	require.True(t, m.Sharded())
	for u := int64(1); u < 200; u++ {
		p := placement.OfUser(u, 3)
		_, on1 := placement.Users{Map: m, Server: 1, Partitions: 3}.Place(u)
		_, on2 := placement.Users{Map: m, Server: 2, Partitions: 3}.Place(u)
		switch p {
		case 0:
			require.True(t, on1 && !on2, "user %d", u)
		case 1:
			require.True(t, !on1 && on2, "user %d", u)
		case 2:
			require.True(t, !on1 && !on2, "user %d of the moving partition", u)
		}
	}
}
