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
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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
	return opts
}
