package fanout

import (
	"context"
	"log/slog"
	"time"

	"github.com/inboxd/inboxd/internal/kgroup"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitToKafka commits the applied offsets of the owned partitions to the
// Kafka group, asynchronously, for tools that read group lag. PostgreSQL's
// offsets stay the only ones read.
func (f *Fanout) commitToKafka(ctx context.Context, cl *kgo.Client) {
	next := f.guard.nextOffsets()
	if len(next) == 0 {
		return
	}
	offs := map[int32]kgo.EpochOffset{}
	for p, o := range next {
		offs[p] = kgo.EpochOffset{Epoch: -1, Offset: o}
	}
	cl.CommitOffsets(ctx, map[string]map[int32]kgo.EpochOffset{f.cfg.Topic: offs},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			if err != nil && ctx.Err() == nil {
				f.cfg.Logger.Debug("committing offsets to the Kafka group failed (informational only)", "err", err)
			}
		})
}

// leave closes the client and, for a static member, leaves the group
// explicitly (Kafka 2.4+), so its partitions move at once at a clean stop
// instead of after the session timeout.
func (f *Fanout) leave(cl *kgo.Client) {
	cl.Close()
	leaveGroup(f.cfg.Brokers, f.cfg.Group, f.cfg.InstanceID, f.cfg.Logger)
}

// leaveGroup makes a closed static member (instanceID) leave group, so
// that its partitions move at once; nothing for a dynamic member.
func leaveGroup(brokers []string, group, instanceID string, log *slog.Logger) {
	if instanceID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err == nil {
		defer adm.Close()
		var resp kadm.LeaveGroupResponses
		resp, err = kadm.NewClient(adm).LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(instanceID).Reason("clean stop"))
		if err == nil {
			err = resp.Error()
		}
	}
	if err != nil {
		log.Warn("leaving the group as a static member failed: its partitions move after the session timeout",
			"group", group, "instance_id", instanceID, "err", err)
		return
	}
	log.Info("left the group", "group", group, "instance_id", instanceID)
}

// clientOpts are the options of the consumer's client: a group member
// whose offsets come from PostgreSQL (adjustOffsets), which never resets
// an offset by itself and never commits for correctness.
// owns is the group's partition filter (Config.Owns), nil for every
// partition.
func (f *Fanout) owns() func(string, int32) bool {
	if f.cfg.Owns == nil {
		return nil
	}
	return func(topic string, p int32) bool { return topic == f.cfg.Topic && f.cfg.Owns(p) }
}

func (f *Fanout) clientOpts() []kgo.Opt {
	opts := append(kgroup.Member{Brokers: f.cfg.Brokers, ClientID: "inboxd-fanout", Group: f.cfg.Group, Topic: f.cfg.Topic,
		InstanceID: f.cfg.InstanceID, SessionTimeout: f.cfg.SessionTimeout, FetchMaxWait: 200 * time.Millisecond,
		Offsets: f.adjustOffsets, Owns: f.owns()}.Opts(),
		kgo.DisableAutoCommit(),
		// Every assigned partition gets an explicit offset (adjustOffsets);
		// an offset the log no longer has is an error to stop on, never a
		// reason to jump to the start or the end.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		// A lost broker connection refreshes metadata after 0.5 s rather
		// than franz-go's default 5 s, so fetches and dead letters resume
		// quickly.
		kgo.MetadataMinAge(500*time.Millisecond),
		kgo.RebalanceTimeout(f.cfg.RebalanceTimeout),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			f.cfg.Logger.Info("partitions revoked", "partitions", m)
			f.parts.forget(m[f.cfg.Topic])
			f.guard.forget(m[f.cfg.Topic])
			f.m.forgetLag(m[f.cfg.Topic])
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			f.cfg.Logger.Warn("partitions lost", "partitions", m)
			f.parts.forget(m[f.cfg.Topic])
			f.guard.forget(m[f.cfg.Topic])
			f.m.forgetLag(m[f.cfg.Topic])
		}),
		// The DLQ is written by the same client: idempotent, acks=all.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
	)
	return opts
}
