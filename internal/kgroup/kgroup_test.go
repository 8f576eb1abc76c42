package kgroup

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Placed gives the members only the partitions owns accepts, each to one
// member, spread round robin, and nothing of a topic no member wants.
func TestPlacedAssignsOnlyOwnedPartitions(t *testing.T) {
	owned := map[int32]bool{1: true, 3: true, 4: true, 6: true, 7: true}
	b := Placed(func(topic string, p int32) bool { return topic == "events" && owned[p] })
	member := func(id string, topics ...string) kmsg.JoinGroupResponseMember {
		return kmsg.JoinGroupResponseMember{MemberID: id, ProtocolMetadata: b.JoinGroupMetadata(topics, nil, 1)}
	}
	mb, topics, err := b.MemberBalancer([]kmsg.JoinGroupResponseMember{member("b", "events"), member("a", "events")})
	require.NoError(t, err)
	_, wanted := topics["events"]
	require.True(t, wanted)
	plan, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"events": 8, "other": 4})
	require.NoError(t, err)
	got := map[string][]int32{}
	var all []int32
	for _, a := range plan.IntoSyncAssignment() {
		parts, err := b.ParseSyncAssignment(a.MemberAssignment)
		require.NoError(t, err)
		require.NotContains(t, parts, "other")
		got[a.MemberID] = parts["events"]
		all = append(all, parts["events"]...)
	}
	slices.Sort(all)
	require.Equal(t, []int32{1, 3, 4, 6, 7}, all, "every owned partition once, no other")
	require.Equal(t, []int32{1, 4, 7}, got["a"])
	require.Equal(t, []int32{3, 6}, got["b"])
	require.Equal(t, PlacedProtocol, b.ProtocolName())
	require.False(t, b.IsCooperative())
}
