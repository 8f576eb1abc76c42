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
