package fanout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
)

// PartitionReport is one partition's stored offsets beside the log's, for
// `inboxd offsets`.
type PartitionReport struct {
	Partition int32
	Stored    *StoredOffset // nil: no row yet
	LogStart  int64
	LogEnd    int64
	Reason    string // "" when the stored offsets belong to the log
	Detail    string
}

// OffsetsReport is what `inboxd offsets` prints.
type OffsetsReport struct {
	Log        LogState
	Partitions []PartitionReport
}

// OK says whether every partition's stored offsets belong to the log.
func (r *OffsetsReport) OK() bool {
	for _, p := range r.Partitions {
		if p.Reason != "" {
			return false
		}
	}
	return true
}

// InspectOffsets compares the stored offsets of topic with its log.
func InspectOffsets(ctx context.Context, pool *pgxpool.Pool, adm *kadm.Client, topic string) (*OffsetsReport, error) {
	return InspectOffsetsOf(ctx, pool, adm, topic, nil)
}

// InspectOffsetsOf is InspectOffsets for the partitions owns accepts (nil:
// all): on one server of a sharded deployment, those it projects, whose
// offsets it stores.
func InspectOffsetsOf(ctx context.Context, pool *pgxpool.Pool, adm *kadm.Client, topic string, owns func(int32) bool) (*OffsetsReport, error) {
	ls, err := InspectLog(ctx, adm, topic)
	if err != nil {
		return nil, err
	}
	stored, err := LoadStoredOffsets(ctx, pool, topic)
	if err != nil {
		return nil, err
	}
	rep := &OffsetsReport{Log: ls}
	seen := map[int32]bool{}
	for p := range ls.End {
		seen[p] = true
	}
	for p := range stored {
		seen[p] = true
	}
	for p := range seen {
		if owns != nil && !owns(p) {
			continue
		}
		r := PartitionReport{Partition: p, Stored: stored[p], LogStart: ls.Start[p], LogEnd: ls.End[p]}
		if _, inLog := ls.End[p]; !inLog {
			r.Reason, r.Detail = "partition_missing", fmt.Sprintf("the log has no partition %d", p)
		} else {
			r.Reason, r.Detail = Diagnose(p, stored[p], ls)
		}
		rep.Partitions = append(rep.Partitions, r)
	}
	sort.Slice(rep.Partitions, func(i, j int) bool { return rep.Partitions[i].Partition < rep.Partitions[j].Partition })
	return rep, nil
}

// Print writes the report for a person: a table, then, when offsets do not
// belong to the log, what happened and the two ways out.
func (r *OffsetsReport) Print(w io.Writer) {
	id := "(no id)"
	if r.Log.ID != [16]byte{} {
		id = formatID(r.Log.ID)
	}
	fmt.Fprintf(w, "topic %s, id %s, %d partitions\n\n", r.Log.Topic, id, len(r.Log.End))
	fmt.Fprintf(w, "%-9s  %-12s  %-12s  %-12s  %-10s  %s\n", "partition", "stored next", "log start", "log end", "lag", "state")
	var bad []string
	for _, p := range r.Partitions {
		stored, lag := "-", "-"
		if p.Stored != nil {
			stored = strconv.FormatInt(p.Stored.Next, 10)
			if p.Reason == "" {
				lag = strconv.FormatInt(p.LogEnd-p.Stored.Next, 10)
			}
		} else if p.Reason == "" {
			lag = strconv.FormatInt(p.LogEnd-p.LogStart, 10)
		}
		state := "ok"
		if p.Reason != "" {
			state = p.Reason + ": " + p.Detail
			bad = append(bad, strconv.Itoa(int(p.Partition)))
		}
		fmt.Fprintf(w, "%-9d  %-12s  %-12d  %-12d  %-10s  %s\n", p.Partition, stored, p.LogStart, p.LogEnd, lag, state)
	}
	if len(bad) == 0 {
		fmt.Fprintf(w, "\nThe stored offsets belong to the log.\n")
		return
	}
	list := strings.Join(bad, ",")
	fmt.Fprintf(w, `
The stored offsets of partitions %s do not belong to the log as it is now: the
topic was deleted and created again, or the broker lost or deleted records. The
fanout stopped those partitions and skipped nothing; their new records wait.
Two ways out (docs/operations.md, "The log and the stored offsets disagree"):

  1. Rebuild the projections from the log as it is now, under a new epoch
     (clients resynchronise through a too-long answer; history that is no
     longer in the log is gone from the projections):
       stop the fanouts; inboxd replay; start the fanouts

  2. Keep the projections and continue from an explicit offset (logged):
       inboxd offsets reset --reset-partitions %s --reset-to start
     --reset-to start projects every record the log holds now; --reset-to
     end skips them; --reset-to N starts at offset N. A running fanout resumes the
     partitions within its log check interval (5 s).
`, list, list)
}

// Reset is one partition's offset reset.
type Reset struct {
	Partition int32
	From      *int64 // nil: no row before
	To        int64
}

// ErrHealthy refuses to reset offsets that belong to the log without force.
var ErrHealthy = errors.New("the stored offsets belong to the log")

const (
	sqlLockOffsetRows = `SELECT "partition", next_offset FROM consumer_offsets WHERE topic = $1 AND "partition" = ANY($2) ORDER BY "partition" FOR UPDATE`
	sqlSetOffset      = `INSERT INTO consumer_offsets (topic, "partition", next_offset, topic_id, updated_at) VALUES ($1, $2, $3, $4, now())
ON CONFLICT (topic, "partition") DO UPDATE SET next_offset = EXCLUDED.next_offset, topic_id = EXCLUDED.topic_id, updated_at = now(),
  delivery_base = consumer_offsets.delivery_base + greatest(0, consumer_offsets.next_offset - EXCLUDED.next_offset)`
)

// ResetOffsets sets the stored next offset of parts (nil: every partition
// whose offsets do not belong to the log) to "start", "end" or a number,
// and records the log's topic id beside it, under the offset row locks the
// projector takes (so it cannot interleave with a batch). Partitions whose
// offsets belong to the log are refused with ErrHealthy unless force: moving
// a healthy partition back re-applies records (deduplicated, but against
// newer state), forward skips them. Each reset is logged at WARN.
func ResetOffsets(ctx context.Context, pool *pgxpool.Pool, adm *kadm.Client, topic string, parts []int32, to string, force bool, log *slog.Logger) ([]Reset, error) {
	return ResetOffsetsOf(ctx, pool, adm, topic, parts, to, force, nil, log)
}

// ResetOffsetsOf is ResetOffsets for the partitions owns accepts (see
// InspectOffsetsOf); another one is refused as not the server's.
func ResetOffsetsOf(ctx context.Context, pool *pgxpool.Pool, adm *kadm.Client, topic string, parts []int32, to string, force bool,
	owns func(int32) bool, log *slog.Logger) ([]Reset, error) {
	rep, err := InspectOffsetsOf(ctx, pool, adm, topic, owns)
	if err != nil {
		return nil, err
	}
	byPart := map[int32]PartitionReport{}
	for _, p := range rep.Partitions {
		byPart[p.Partition] = p
	}
	if parts == nil {
		for _, p := range rep.Partitions {
			if p.Reason != "" && p.Reason != "partition_missing" {
				parts = append(parts, p.Partition)
			}
		}
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	var resets []Reset
	for _, p := range parts {
		if owns != nil && !owns(p) {
			return nil, fmt.Errorf("partition %d: projected by another server (inboxd shards list)", p)
		}
		pr, ok := byPart[p]
		if !ok || pr.Reason == "partition_missing" {
			return nil, fmt.Errorf("partition %d: not in the log of %s", p, topic)
		}
		if pr.Reason == "" && !force {
			return nil, fmt.Errorf("partition %d: %w (use --reset-healthy to move it anyway, with the fanouts stopped)", p, ErrHealthy)
		}
		var target int64
		switch to {
		case "start":
			target = pr.LogStart
		case "end":
			target = pr.LogEnd
		default:
			n, err := strconv.ParseInt(to, 10, 64)
			if err != nil || n < pr.LogStart || n > pr.LogEnd {
				return nil, fmt.Errorf("partition %d: --to %q is not start, end or an offset in [%d, %d]", p, to, pr.LogStart, pr.LogEnd)
			}
			target = n
		}
		r := Reset{Partition: p, To: target}
		if pr.Stored != nil {
			from := pr.Stored.Next
			r.From = &from
		}
		resets = append(resets, r)
	}
	if len(resets) == 0 {
		return nil, nil
	}
	var id pgtype.UUID
	if rep.Log.ID != [16]byte{} {
		id = pgtype.UUID{Bytes: rep.Log.ID, Valid: true}
	}
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLockOffsetRows, topic, parts); err != nil {
			return fmt.Errorf("lock the offsets of %s: %w", topic, err)
		}
		for _, r := range resets {
			if _, err := tx.Exec(ctx, sqlSetOffset, topic, r.Partition, r.To, id); err != nil {
				return fmt.Errorf("reset %s/%d: %w", topic, r.Partition, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, r := range resets {
		from := "none"
		if r.From != nil {
			from = strconv.FormatInt(*r.From, 10)
		}
		log.Warn("stored offset reset by an operator", "topic", topic, "partition", r.Partition, "from", from, "to", r.To,
			"was", byPart[r.Partition].Reason, "topic_id", formatIDOrNone(rep.Log.ID))
	}
	return resets, nil
}

func formatIDOrNone(id [16]byte) string {
	if id == [16]byte{} {
		return "none"
	}
	return formatID(id)
}
