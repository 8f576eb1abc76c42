package notifier

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/kgroup"
)

// The consumer: a group member whose offsets live in PostgreSQL
// (notifier_offsets, written with the notifications they produced). A
// partition the notifier has never seen starts where the fanout is: a new
// notifier notifies of what comes next, not of the history.

// sqlStart is where partitions start: the notifier's stored offset, else
// the fanout's, which is stored at once as the notifier's (a notifier that
// dies before it queued anything starts there again, and skips nothing
// that came after it was assigned the partition).
const sqlStart = `WITH fresh AS (INSERT INTO notifier_offsets (topic, "partition", next_offset)
	SELECT $1, c."partition", c.next_offset FROM consumer_offsets c
	WHERE c.topic = $1 AND c."partition" = ANY($2::int[])
	ON CONFLICT DO NOTHING RETURNING "partition", next_offset)
SELECT p, COALESCE((SELECT next_offset FROM fresh WHERE "partition" = p),
	(SELECT next_offset FROM notifier_offsets WHERE topic = $1 AND "partition" = p), -1)
FROM unnest($2::int[]) AS p`

// sqlProjected is the fanout's next offset of a partition: the records
// below it are projected.
const sqlProjected = `SELECT COALESCE((SELECT next_offset FROM consumer_offsets WHERE topic = $1 AND "partition" = $2), 0)`

func (n *Notifier) consume(ctx context.Context) error {
	member := kgroup.Member{Brokers: n.cfg.Brokers, ClientID: "inboxd-notifier", Group: n.cfg.Group, Topic: n.cfg.Topic,
		InstanceID: n.cfg.InstanceID, SessionTimeout: n.cfg.SessionTimeout, FetchMaxWait: 200 * time.Millisecond,
		Offsets: n.startOffsets}
	if n.sharded() {
		owns := n.cfg.Servers.Owns
		member.Owns = func(_ string, p int32) bool { return owns(p) }
	}
	opts := append(member.Opts(),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("notifier: kafka client: %w", err)
	}
	defer cl.CloseAllowingRebalance() // polls block rebalances: a plain Close would wait for one
	defer n.ready.Store(false)
	for {
		fetches := cl.PollRecords(ctx, 5000)
		if ctx.Err() != nil {
			return nil
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				n.cfg.Logger.Warn("fetch failed", "topic", t, "partition", p, "err", err)
			}
		})
		var handleErr error
		fetches.EachPartition(func(ft kgo.FetchTopicPartition) {
			if handleErr == nil && len(ft.Records) > 0 {
				handleErr = n.handle(ctx, ft.Partition, ft.Records)
			}
		})
		cl.AllowRebalance()
		if handleErr != nil {
			if ctx.Err() != nil {
				return nil
			}
			return handleErr
		}
	}
}

// startOffsets starts each assigned partition at the notifier's stored
// offset, else at the fanout's, else at the log's end.
func (n *Notifier) startOffsets(ctx context.Context, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	out := map[string]map[int32]kgo.Offset{}
	for topic, parts := range assigned {
		ids := make([]int32, 0, len(parts))
		for p := range parts {
			ids = append(ids, p)
		}
		rows, err := n.pool.Query(ctx, sqlStart, topic, ids)
		if err != nil {
			return nil, fmt.Errorf("notifier: start offsets of %s: %w", topic, err)
		}
		out[topic] = map[int32]kgo.Offset{}
		var p int32
		var at int64
		if _, err := pgx.ForEachRow(rows, []any{&p, &at}, func() error {
			if at < 0 {
				out[topic][p] = kgo.NewOffset().AtEnd()
			} else {
				out[topic][p] = kgo.NewOffset().At(at).WithEpoch(-1)
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("notifier: start offsets of %s: %w", topic, err)
		}
	}
	n.ready.Store(true) // in the group, each partition's start stored
	return out, nil
}

// handle queues the notifications of one partition's polled records, once
// the fanout has projected them, retrying what fails (PostgreSQL away)
// until it is done or ctx ends.
func (n *Notifier) handle(ctx context.Context, p int32, recs []*kgo.Record) error {
	from, next := recs[0].Offset, recs[len(recs)-1].Offset+1
	var msgIDs, reports []string
	for _, r := range recs {
		e, err := events.Decode(r.Value, 0)
		switch {
		case err != nil || e.Imported():
			// Undecodable records are the fanout's (DLQ); imported history notifies nobody.
		case e.Type == events.MessageSent:
			msgIDs = append(msgIDs, e.MsgID)
		case e.Type == events.MessageReported && n.cfg.Reports:
			reports = append(reports, e.EventID)
		}
	}
	op := func() error {
		if err := n.awaitProjected(ctx, p, next); err != nil {
			return err
		}
		ok, err := n.queue(ctx, p, from, next, msgIDs, reports)
		if err == nil && !ok {
			n.cfg.Logger.Info("partition moved on under another notifier; its records are skipped", "partition", p, "offset", from)
		}
		return err
	}
	bo := backoff.NewExponentialBackOff()
	bo.MaxElapsedTime = 0
	return backoff.RetryNotify(op, backoff.WithContext(bo, ctx), func(err error, d time.Duration) {
		n.cfg.Logger.Warn("queuing notifications failed, retrying", "partition", p, "err", err, "retry_in", d)
	})
}

// awaitProjected waits until the fanout's offset of partition p reaches
// next: every record below it is projected (or refused) by then.
func (n *Notifier) awaitProjected(ctx context.Context, p int32, next int64) error {
	for {
		var projected int64
		if err := n.pool.QueryRow(ctx, sqlProjected, n.cfg.Topic, p).Scan(&projected); err != nil {
			return err
		}
		if projected >= next {
			return nil
		}
		select {
		case <-ctx.Done():
			return backoff.Permanent(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
