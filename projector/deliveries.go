package projector

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/projection"
)

// The conversation stage of a sharded projection (docs/scaling.md, "The
// two stages"): a batch of the event topic is applied on the server of its
// partitions as always, and whatever it projects for users whose state is
// on another server leaves as deliveries, one outbox row per source
// partition and destination partition, in the batch's own transaction.
// Members on the conversation's own server are written as today: with
// every user local (one server), nothing changes and nothing crosses.
//
// The conversation stage keeps the rule state of every member, local or
// not: the records its rules read (pin, mute, read position, removed,
// armed), the spans and the mentions. A remote user's record on the
// conversation's server is that copy (its version stays 0); the one its
// own server serves comes with the deliveries.

// UserPlacement places users when the projection is sharded.
type UserPlacement interface {
	// Place returns the partition of the user-keyed topic that user's
	// state follows, and whether that partition is on this projector's
	// server.
	Place(user int64) (partition int32, local bool)
}

// Delivery is what one batch of a conversation stage projected for the
// users of one destination partition on another server: their entries in
// the batch's order, and the read positions and acknowledgements that go
// with them. (Source, Offset) is unique per destination and grows with
// every batch of the source partition: the user stage applies a delivery
// once, the first time it sees it.
type Delivery struct {
	Source int32 `json:"p"` // the partition of the event topic
	// Offset is the next offset of Source after the batch, plus the
	// partition's delivery_base (0 until an operator resets its offsets
	// back): it grows with every batch of the source partition, across
	// resets too.
	Offset int64  `json:"o"`
	Items  []Item `json:"items"`
}

// Item is one user's entry, read position or acknowledgement in a
// Delivery.
type Item struct {
	User int64 `json:"u"`
	Conv int64 `json:"c"`
	// Kind is the inbox entry's kind (projection.KindMessage, KindRecord,
	// KindUpdate), 0 for an item that makes no entry (ReadTo alone).
	Kind int16 `json:"k,omitempty"`
	Seq  int64 `json:"s,omitempty"`
	// Version is the message's version at the end of the batch (kind
	// update).
	Version int64     `json:"v,omitempty"`
	At      time.Time `json:"t"`
	// Record is the user's record of Conv at the end of the batch (kind
	// record).
	Record *DeliveredRecord `json:"r,omitempty"`
	// ReadTo moves the user's read position in Conv to at least this seq
	// without an entry (the user's own message, imported history).
	ReadTo int64 `json:"read,omitempty"`
	// Ack is the event id of the user's message.sent this entry is the
	// message of: the sender's gateway learns it is projected when its
	// own inbox has it.
	Ack string `json:"ack,omitempty"`
}

// DeliveredRecord is a record's state as delivered.
type DeliveredRecord struct {
	Pinned  bool  `json:"pinned,omitempty"`
	Muted   bool  `json:"muted,omitempty"`
	Removed bool  `json:"removed,omitempty"`
	ReadSeq int64 `json:"read_seq"`
}

// outboxRow is one delivery to write.
type outboxRow struct {
	destination int32
	d           Delivery
}

// route splits the batch's entries between the users on this server,
// which stay in t.b.fan, and the deliveries to the others, in t.out. The
// records of recs say which source partition each conversation is on.
func (t *txn) route(recs []Record) {
	users := t.p.cfg.Users
	if users == nil {
		return
	}
	b := t.b
	convPart := map[int64]int32{}
	for _, r := range recs {
		if r.Event != nil {
			convPart[r.Event.ConversationID] = r.Partition
		}
	}
	type route struct{ src, dst int32 }
	var order []route
	out := map[route]*Delivery{}
	add := func(user, conv int64, it Item) *Item {
		dst, local := users.Place(user)
		if local {
			return nil
		}
		k := route{convPart[conv], dst}
		d := out[k]
		if d == nil {
			// Numbered by the source's offset past the batch, above
			// every number before it: raised by the partition's
			// delivery_base, which a reset of its offsets back raises.
			d = &Delivery{Source: k.src, Offset: t.bases[k.src] + t.parts[k.src]}
			out[k] = d
			order = append(order, k)
		}
		it.User, it.Conv = user, conv
		d.Items = append(d.Items, it)
		return &d.Items[len(d.Items)-1]
	}
	type entryKey struct{ user, conv, seq int64 }
	type itemAt struct {
		d *Delivery
		i int
	}
	sentTo := map[entryKey]itemAt{} // a remote message entry: its delivery and item
	local := b.fan[:0:0]
	for _, f := range b.fan {
		it := Item{Kind: f.kind, Seq: f.seq, At: f.at}
		switch f.kind {
		case projection.KindRecord:
			it.Record = &DeliveredRecord{Pinned: f.rec.pinned, Muted: f.rec.muted, Removed: f.rec.removed, ReadSeq: f.rec.readSeq}
		case projection.KindUpdate:
			it.Version = f.msg.version
		}
		if add(f.user, f.conv, it) == nil {
			local = append(local, f)
			continue
		}
		if f.kind == projection.KindMessage {
			dst, _ := users.Place(f.user)
			d := out[route{convPart[f.conv], dst}]
			sentTo[entryKey{f.user, f.conv, f.seq}] = itemAt{d, len(d.Items) - 1}
		}
	}
	b.fan = local
	for _, k := range sortedReads(b.reads) {
		if _, isLocal := users.Place(k.user); !isLocal {
			add(k.user, k.conv, Item{ReadTo: b.reads[k]}) // the rule copy here moves too (queueReads)
		}
	}
	for _, c := range sortedConvs(b.importedRead) {
		for u := range b.convs[c].members {
			add(u, c, Item{ReadTo: b.importedRead[c]})
		}
	}
	// A sender on another server is answered when its own entry is
	// applied there (a sync right after the answer finds it).
	acks := b.acks[:0:0]
	for _, a := range b.acks {
		at, ok := sentTo[entryKey{a.user, a.conv, a.seq}]
		if !ok {
			acks = append(acks, a)
			continue
		}
		at.d.Items[at.i].Ack = a.eventID
	}
	b.acks = acks
	for _, k := range order {
		t.out = append(t.out, outboxRow{destination: k.dst, d: *out[k]})
	}
}

func sortedReads(m map[recKey]int64) []recKey {
	ks := make([]recKey, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].user != ks[j].user {
			return ks[i].user < ks[j].user
		}
		return ks[i].conv < ks[j].conv
	})
	return ks
}

func sortedConvs(m map[int64]int64) []int64 {
	cs := make([]int64, 0, len(m))
	for c := range m {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i] < cs[j] })
	return cs
}

const sqlInsertOutbox = `INSERT INTO outbox (destination, source_partition, source_offset, payload)
SELECT * FROM unnest($1::int[], $2::int[], $3::bigint[], $4::jsonb[])`

// sqlCountEmitted counts the batch's deliveries per source and
// destination (one row each per batch).
const sqlCountEmitted = `INSERT INTO delivery_sources (source_partition, destination, emitted, last_offset)
SELECT s, d, 1, o FROM unnest($1::int[], $2::int[], $3::bigint[]) AS u(s, d, o)
ON CONFLICT (source_partition, destination) DO UPDATE SET emitted = delivery_sources.emitted + 1, last_offset = excluded.last_offset`

// OutboxChannel is the NOTIFY channel a batch that wrote deliveries wakes
// the relay on.
const OutboxChannel = "inboxd_outbox"

// queueOutbox queues the batch's deliveries.
func (t *txn) queueOutbox(bt *pgx.Batch) error {
	n := len(t.out)
	if n == 0 {
		return nil
	}
	ds, ss, os, ps := make([]int32, n), make([]int32, n), make([]int64, n), make([]string, n)
	for i, o := range t.out {
		raw, err := json.Marshal(o.d)
		if err != nil {
			return fmt.Errorf("encode a delivery: %w", err)
		}
		ds[i], ss[i], os[i], ps[i] = o.destination, o.d.Source, o.d.Offset, string(raw)
	}
	bt.Queue(sqlInsertOutbox, ds, ss, os, ps)
	bt.Queue(sqlCountEmitted, ss, ds, os)
	bt.Queue(`SELECT pg_notify($1, '')`, OutboxChannel)
	return nil
}
