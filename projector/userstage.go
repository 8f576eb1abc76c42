package projector

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/projection"
)

// The user stage of a sharded projection (docs/scaling.md, "The two
// stages"): the deliveries the conversation stages of other servers wrote
// for this server's users arrive on the user's partition of the
// deliveries topic and are applied here, under the users' locks, with the
// topic's offsets and the marks of the sources in the same transaction.

// DeliveryRecord is one record of the deliveries topic.
type DeliveryRecord struct {
	Partition int32 // the destination: the users' partition
	Offset    int64
	// Delivery is nil for a record that could not be decoded: it only
	// moves the offset.
	Delivery *Delivery
}

const (
	sqlEnsureMarks = `INSERT INTO delivery_marks (destination, source_partition, applied)
SELECT d, s, 0 FROM unnest($1::int[], $2::int[]) AS u(d, s) ORDER BY d, s ON CONFLICT DO NOTHING`
	sqlLockMarks = `SELECT m.destination, m.source_partition, m.applied FROM delivery_marks m
JOIN unnest($1::int[], $2::int[]) AS u(d, s) ON m.destination = u.d AND m.source_partition = u.s
ORDER BY m.destination, m.source_partition FOR UPDATE OF m`
	sqlUpdateMarks = `UPDATE delivery_marks m SET applied = u.a, applied_count = m.applied_count + u.n, updated_at = now()
FROM unnest($1::int[], $2::int[], $3::bigint[], $4::bigint[]) AS u(d, s, a, n) WHERE m.destination = u.d AND m.source_partition = u.s`
)

type markKey struct{ destination, source int32 }

// ApplyDeliveries applies recs (in log order within each partition) in one
// transaction: the entries of every delivery not applied yet are numbered
// in their users' inboxes, their records written and their read positions
// moved. A record below the stored offsets, or a delivery at or below its
// source's mark (a copy the relay produced again), changes nothing.
//
// Lock order: the placement fence (shared, when Config.PlacementVersion
// is set), the deliveries topic's offsets, the marks, then the users;
// a conversation stage locks its own topic's offsets, conversations, then
// users, so the two stages never wait for each other in a cycle.
func (p *Projector) ApplyDeliveries(ctx context.Context, recs []DeliveryRecord) (Result, error) {
	var res Result
	if len(recs) == 0 {
		return res, nil
	}
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	topic := p.cfg.Deliveries

	parts := map[int32]int64{}
	var partIDs []int32
	marks := map[markKey]int64{}
	var markIDs []markKey
	for _, r := range recs {
		if _, ok := parts[r.Partition]; !ok {
			partIDs = append(partIDs, r.Partition)
		}
		parts[r.Partition] = max(parts[r.Partition], r.Offset+1)
		if r.Delivery != nil {
			k := markKey{r.Partition, r.Delivery.Source}
			if _, ok := marks[k]; !ok {
				marks[k] = 0
				markIDs = append(markIDs, k)
			}
		}
	}
	sort.Slice(partIDs, func(i, j int) bool { return partIDs[i] < partIDs[j] })
	sort.Slice(markIDs, func(i, j int) bool {
		if markIDs[i].destination != markIDs[j].destination {
			return markIDs[i].destination < markIDs[j].destination
		}
		return markIDs[i].source < markIDs[j].source
	})

	stored := map[int32]int64{}
	bt := &pgx.Batch{}
	fence := int64(0)
	if p.cfg.PlacementVersion > 0 {
		bt.Queue(sqlFence).QueryRow(func(row pgx.Row) error { return row.Scan(&fence) })
	}
	bt.Queue(sqlEnsureOffsets, topic, partIDs)
	queueLockOffsets(bt, topic, partIDs, stored, nil)
	if len(markIDs) > 0 {
		ds, ss := make([]int32, len(markIDs)), make([]int32, len(markIDs))
		for i, k := range markIDs {
			ds[i], ss[i] = k.destination, k.source
		}
		bt.Queue(sqlEnsureMarks, ds, ss)
		bt.Queue(sqlLockMarks, ds, ss).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k markKey
				var applied int64
				if err := rows.Scan(&k.destination, &k.source, &applied); err != nil {
					return err
				}
				marks[k] = applied
			}
			return rows.Err()
		})
	}
	if err := tx.SendBatch(ctx, bt).Close(); err != nil {
		return res, fmt.Errorf("lock offsets of %s and marks: %w", topic, err)
	}
	if err := fenced(p.cfg.PlacementVersion, fence); err != nil {
		return res, err
	}
	if len(stored) != len(partIDs) {
		return res, &FencedError{Msg: fmt.Sprintf("lock offsets of %s: %d of %d partitions have a row", topic, len(stored), len(partIDs))}
	}

	t := &txn{p: p, tx: tx, b: newBatch(int64(p.cfg.LargeThreshold))}
	moved := map[markKey]int64{} // deliveries applied per mark
	for _, r := range recs {
		if r.Offset < stored[r.Partition] {
			res.Skipped++
			continue
		}
		res.Records++
		d := r.Delivery
		if d == nil {
			continue
		}
		k := markKey{r.Partition, d.Source}
		if d.Offset <= marks[k] {
			res.Copies++ // a copy of a delivery already applied
			continue
		}
		marks[k] = d.Offset
		moved[k]++
		res.Applied++
		t.b.delivered(d)
	}

	if err := t.assign(ctx); err != nil {
		return res, err
	}
	number(t.b.fan, t.heads)
	bt = &pgx.Batch{}
	t.queueRecords(bt)
	t.queueReads(bt)
	t.queueHeads(bt)
	queueInbox(bt, t.b.fan)
	if len(moved) > 0 {
		var ds, ss []int32
		var as, ns []int64
		for _, k := range markIDs {
			if n := moved[k]; n > 0 {
				ds, ss, as, ns = append(ds, k.destination), append(ss, k.source), append(as, marks[k]), append(ns, n)
			}
		}
		bt.Queue(sqlUpdateMarks, ds, ss, as, ns)
	}
	var ps []int32
	var ns []int64
	for _, pt := range partIDs {
		if parts[pt] > stored[pt] {
			ps, ns = append(ps, pt), append(ns, parts[pt])
		}
	}
	bt.Queue(sqlUpdateOffsets, topic, ps, ns)
	t.queueNotify(bt, len(t.b.fan) <= smallWriteRows)
	if err := tx.SendBatch(ctx, bt).Close(); err != nil {
		return res, fmt.Errorf("write deliveries: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("commit deliveries: %w", err)
	}
	res.InboxRows = len(t.b.fan)
	res.Users = len(t.heads)
	return res, nil
}

// delivered adds the items of d to the batch: its entries to the fan, in
// order, a record's state to the records (the last delivery's wins: it is
// the later state), read positions to the reads and acknowledgements to
// the acks.
func (b *batch) delivered(d *Delivery) {
	for _, it := range d.Items {
		k := recKey{it.User, it.Conv}
		if it.ReadTo > 0 {
			b.reads[k] = max(b.reads[k], it.ReadTo)
		}
		if it.Kind == 0 {
			continue
		}
		f := fanRow{user: it.User, conv: it.Conv, kind: it.Kind, seq: it.Seq, at: it.At}
		switch it.Kind {
		case projection.KindRecord:
			rs := b.current(it.User, it.Conv)
			if r := it.Record; r != nil {
				rs.pinned, rs.muted, rs.removed, rs.readSeq = r.Pinned, r.Muted, r.Removed, r.ReadSeq
			}
			if !rs.dirty {
				rs.dirty = true
				b.recsOrder = append(b.recsOrder, k)
			}
			f.rec = rs
		case projection.KindUpdate:
			f.msg = &msgState{version: it.Version}
		}
		b.fan = append(b.fan, f)
		if it.Ack != "" {
			b.acks = append(b.acks, ack{eventID: it.Ack, seq: it.Seq, user: it.User, conv: it.Conv})
		}
	}
}
