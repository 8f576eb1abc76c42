package fanout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/projector"
)

// splitMaxRecords is the most records of a poll that applyGroups splits
// into concurrent transactions. A larger poll (catching up) is applied in
// one: its groups would name mostly the same users, and each group locks
// its users in id order for the whole transaction, so the second waits on
// the first's locks until it commits. They run one after the other
// anyway, each locking, updating and notifying the shared users once more,
// and which one waits changes from run to run. A live poll is a few
// records whose users rarely meet, and there the concurrency pays.
const splitMaxRecords = 500

// applyGroups applies recs as ApplyWorkers concurrent transactions, the
// records of a partition all in the same one and in order; a poll of more
// than splitMaxRecords records is one transaction.
func (f *Fanout) applyGroups(ctx, applyCtx context.Context, cl *kgo.Client, fetched []*kgo.Record, recs []projector.Record) error {
	n := f.cfg.ApplyWorkers
	if n == 1 || len(recs) > splitMaxRecords {
		return f.applyBatch(ctx, applyCtx, cl, fetched, recs)
	}
	groups := make([][]projector.Record, n)
	for _, r := range recs {
		i := int(r.Partition) % n
		groups[i] = append(groups[i], r)
	}
	var g errgroup.Group
	for _, grp := range groups {
		if len(grp) > 0 {
			g.Go(func() error { return f.applyBatch(ctx, applyCtx, cl, fetched, grp) })
		}
	}
	return g.Wait()
}

// isolateError ends the retries of a batch that fails because of the data
// of one of its records.
type isolateError struct{ err error }

func (e *isolateError) Error() string { return e.err.Error() }

// applyBatch applies recs in one transaction.
//
// A failure is handled by its projector.Class. Transient and systemic
// failures retry the same batch with backoff until they pass or ctx ends.
// A data failure splits the batch in halves, applied in order (so each
// partition keeps its order), until the failing record is alone; alone, it
// is tried RecordAttempts times, then probed (projector.Probe): if a copy
// with its text replaced applies and the record after it still fails, the
// record itself is the cause and goes to the DLQ; if the record applies
// too, the database was mended meanwhile and the record is retried; if the
// copy fails, the database refuses records of its shape, dropping it would
// not help, and it is retried like a systemic failure.
func (f *Fanout) applyBatch(ctx, applyCtx context.Context, cl *kgo.Client, fetched []*kgo.Record, recs []projector.Record) error {
	start := time.Now()
	first := firstOffsets(recs)
	attempts := 0
	var res projector.Result
	op := func() error {
		var err error
		// The batch in hand is finished even when shutdown begins, within
		// the drain timeout.
		res, err = f.proj.Apply(applyCtx, recs)
		if err == nil {
			return nil
		}
		attempts++
		class := projector.Classify(err)
		if class == projector.DataError && len(recs) == 1 && attempts >= f.cfg.RecordAttempts {
			if perr := f.proj.Probe(applyCtx, recs[0]); perr == nil {
				return backoff.Permanent(&isolateError{err})
			} else if errors.Is(perr, projector.ErrHealed) {
				f.cfg.Logger.Info("a record that failed to project applies now: retrying it",
					"topic", f.cfg.Topic, "partition", recs[0].Partition, "offset", recs[0].Offset, "err", err)
			} else if projector.Classify(perr) != projector.Transient {
				class = projector.Systemic
				f.cfg.Logger.Error("a record fails to project and so does a copy with its text replaced: not dead-lettered, retrying",
					"topic", f.cfg.Topic, "partition", recs[0].Partition, "offset", recs[0].Offset, "err", err, "probe_err", perr)
			}
		}
		f.parts.failed(first, class.String(), err)
		f.m.failures.WithLabelValues(class.String()).Inc()
		if class == projector.DataError && len(recs) > 1 {
			f.cfg.Logger.Error("a batch fails on the data of a record: isolating it",
				"topic", f.cfg.Topic, "records", len(recs), "offsets", first, "err", err)
			return backoff.Permanent(&isolateError{err})
		}
		return err
	}
	notify := func(err error, d time.Duration) {
		f.m.retries.Inc()
		class := projector.Classify(err)
		args := []any{"topic", f.cfg.Topic, "records", len(recs), "offsets", first, "attempt", attempts, "class", class.String(), "err", err, "retry_in", d}
		if class == projector.Transient && attempts < 10 {
			f.cfg.Logger.Warn("applying batch failed, retrying", args...)
			return
		}
		// A partition that stays stuck is an ERROR with its offsets; the
		// backoff (capped at MaxRetryInterval) bounds the rate.
		f.cfg.Logger.Error("applying batch failed, partitions stuck, retrying", args...)
	}
	err := backoff.RetryNotify(op, backoff.WithContext(f.backoff(), ctx), notify)
	var iso *isolateError
	switch {
	case err == nil:
		f.m.observe(res, recs, start)
		if res.Rejected > 0 {
			f.cfg.Logger.Info("events rejected at their log position", "count", res.Rejected)
		}
		if res.Skipped > 0 {
			// Normal after a rebalance (a batch fetched before it); the log
			// check stops a partition whose log went backwards.
			f.cfg.Logger.Info("records below the stored offsets skipped as already applied", "count", res.Skipped, "offsets", first)
		}
		if res.Behind > 0 {
			// Normal when partitions come back after a rebalance: another
			// process applied them meanwhile.
			f.cfg.Logger.Info("cached conversations read again: another process moved their partitions", "count", res.Behind, "offsets", first)
		}
		return nil
	case errors.As(err, &iso) && len(recs) > 1:
		mid := len(recs) / 2
		if err := f.applyBatch(ctx, applyCtx, cl, fetched, recs[:mid]); err != nil {
			return err
		}
		return f.applyBatch(ctx, applyCtx, cl, fetched, recs[mid:])
	case errors.As(err, &iso):
		return f.deadLetterRecord(ctx, applyCtx, cl, fetched, recs[0], iso.err)
	default:
		return fmt.Errorf("apply batch of %d records: %w", len(recs), err)
	}
}

// deadLetterRecord sends r, which fails to project because of its data, to
// the DLQ, then moves its partition past it: the event is stored as a
// rejection (projection.ReasonDeadLetter), so it takes no seq and a waiting
// sender is told. The dead letter is written before the offset moves, so a
// crash in between can duplicate it but never lose it.
func (f *Fanout) deadLetterRecord(ctx, applyCtx context.Context, cl *kgo.Client, fetched []*kgo.Record, r projector.Record, cause error) error {
	raw := findRecord(fetched, r.Partition, r.Offset)
	if raw == nil {
		// Cannot happen: r came from these fetches.
		return fmt.Errorf("dead-letter %d/%d: record not in its poll", r.Partition, r.Offset)
	}
	reason := "projection failed: " + cause.Error()
	op := func() error { return cl.ProduceSync(ctx, deadLetter(f.cfg.DLQTopic, raw, reason)).FirstErr() }
	if err := backoff.RetryNotify(op, backoff.WithContext(f.backoff(), ctx), func(err error, d time.Duration) {
		f.cfg.Logger.Warn("writing dead letters failed, retrying", "err", err, "retry_in", d)
	}); err != nil {
		return fmt.Errorf("dead-letter %d/%d: %w", r.Partition, r.Offset, err)
	}
	f.m.dead.Inc()
	f.cfg.Logger.Error("record dead-lettered: it fails to project",
		"topic", f.cfg.Topic, "partition", r.Partition, "offset", r.Offset, "dlq", f.cfg.DLQTopic, "reason", reason)
	dead := r
	dead.DeadLetter = true
	apply := func() error {
		_, err := f.proj.Apply(applyCtx, []projector.Record{dead})
		if err != nil && projector.Classify(err) != projector.Transient && dead.Event != nil {
			// The rejection row itself is refused: move the offset alone.
			f.cfg.Logger.Error("storing the dead letter's rejection failed: moving its offset only",
				"partition", r.Partition, "offset", r.Offset, "err", err)
			dead.Event = nil
		}
		return err
	}
	if err := backoff.RetryNotify(apply, backoff.WithContext(f.backoff(), ctx), func(err error, d time.Duration) {
		f.cfg.Logger.Warn("moving past a dead letter failed, retrying", "partition", r.Partition, "offset", r.Offset, "err", err, "retry_in", d)
	}); err != nil {
		return fmt.Errorf("move past dead letter %d/%d: %w", r.Partition, r.Offset, err)
	}
	return nil
}

// firstOffsets returns the first offset of each partition in recs.
func firstOffsets(recs []projector.Record) map[int32]int64 {
	out := map[int32]int64{}
	for _, r := range recs {
		if o, ok := out[r.Partition]; !ok || r.Offset < o {
			out[r.Partition] = r.Offset
		}
	}
	return out
}

// findRecord returns the fetched record at partition p, offset o.
func findRecord(fetched []*kgo.Record, p int32, o int64) *kgo.Record {
	for _, r := range fetched {
		if r.Partition == p && r.Offset == o {
			return r
		}
	}
	return nil
}
