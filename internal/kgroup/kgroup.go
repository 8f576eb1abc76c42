// Package kgroup is what every consumer group member of inboxd (the
// fanout, the notifier, analytics) sets up the same way: a franz-go client
// that joins a group on one topic, reads committed records only, holds
// rebalances while a poll is being handled (so that a batch is applied or
// counted before its partitions can move), and takes each assigned
// partition's starting offset from the member itself (PostgreSQL for the
// fanout and the notifier) rather than from the group. What differs
// (commits, resets, callbacks, the DLQ producer) each member adds.
package kgroup

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Member describes one group member's client.
type Member struct {
	Brokers  []string
	ClientID string
	Group    string
	Topic    string
	// InstanceID, when set, makes the member static (KIP-345): a restart
	// under the same id gets its partitions back without a rebalance.
	InstanceID string
	// SessionTimeout, when set, is the group session timeout; the
	// heartbeat is a sixth of it (at least 100 ms). Zero keeps franz-go's.
	SessionTimeout time.Duration
	// FetchMaxWait bounds how long a fetch waits for records: the
	// latency of an idle member's first record. Zero keeps franz-go's.
	FetchMaxWait time.Duration
	// Offsets chooses the offset each assigned partition starts at.
	Offsets func(ctx context.Context, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error)
	// Owns, when set, restricts the member's group to the partitions it
	// accepts (Placed); nil keeps franz-go's balancers.
	Owns func(topic string, partition int32) bool
}

// Opts are the client options m describes; the caller appends its own.
func (m Member) Opts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(m.Brokers...),
		kgo.ClientID(m.ClientID),
		kgo.ConsumerGroup(m.Group),
		kgo.ConsumeTopics(m.Topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.BlockRebalanceOnPoll(),
		kgo.AdjustFetchOffsetsFn(m.Offsets),
	}
	if m.FetchMaxWait > 0 {
		opts = append(opts, kgo.FetchMaxWait(m.FetchMaxWait))
	}
	if m.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(m.SessionTimeout),
			kgo.HeartbeatInterval(max(m.SessionTimeout/6, 100*time.Millisecond)))
	}
	if m.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(m.InstanceID))
	}
	if m.Owns != nil {
		opts = append(opts, kgo.Balancers(Placed(m.Owns)))
	}
	return opts
}

// Placed is the group balancer of a sharded deployment's per-server
// groups (docs/scaling.md): it assigns only the partitions owns accepts
// (those the placement puts on the group's server), round-robin over the
// members in their sorted order, so that a member never holds a partition
// whose state is on another server. The leader's view of the placement
// decides; every member of one server's group reads the same one. It is
// eager: a rebalance revokes everything, which a placement change (a
// move) forces anyway.
func Placed(owns func(topic string, partition int32) bool) kgo.GroupBalancer {
	return &placed{owns: owns}
}

// PlacedProtocol is Placed's protocol name in the group.
const PlacedProtocol = "inboxd-placed"

type placed struct {
	owns func(string, int32) bool
}

func (*placed) ProtocolName() string { return PlacedProtocol }
func (*placed) IsCooperative() bool  { return false }

func (*placed) JoinGroupMetadata(interests []string, _ map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
	return meta.AppendTo(nil)
}

func (*placed) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	return kgo.ParseConsumerSyncAssignment(assignment)
}

func (p *placed) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	b, err := kgo.NewConsumerBalancer(p, members)
	return b, b.MemberTopics(), err
}

func (p *placed) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	plan := b.NewPlan()
	names := make([]string, 0, len(topics))
	for t := range b.MemberTopics() {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, topic := range names {
		var subscribed []string
		b.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
			if slices.Contains(meta.Topics, topic) {
				subscribed = append(subscribed, m.MemberID)
			}
		})
		if len(subscribed) == 0 {
			continue
		}
		sort.Strings(subscribed)
		i := 0
		for part := range topics[topic] {
			if !p.owns(topic, part) {
				continue
			}
			plan.AddPartitions(&kmsg.JoinGroupResponseMember{MemberID: subscribed[i%len(subscribed)]}, topic, []int32{part})
			i++
		}
	}
	return plan
}
