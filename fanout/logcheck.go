package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Why a partition's projection was stopped: its stored offsets do not
// belong to the log as it is now. Records are never skipped for these; an
// operator decides (docs/operations.md, "The log and the stored offsets
// disagree").
const (
	// StopTopicRecreated: the topic's id is not the one the offsets were
	// stored for (the topic was deleted and created again).
	StopTopicRecreated = "topic_recreated"
	// StopOffsetBeyondEnd: the stored next offset is past the end of the
	// partition (the log lost records it had, or was recreated).
	StopOffsetBeyondEnd = "offset_beyond_end"
	// StopLogTruncated: records between the stored offset and the start
	// of the log were deleted before they were projected.
	StopLogTruncated = "log_truncated"
	// StopLogRewound: a fetch returned records below the offset the
	// partition had reached.
	StopLogRewound = "log_rewound"
)

// LogState is what the log says of a topic: its id and each partition's
// start and end offsets.
type LogState struct {
	Topic string
	ID    [16]byte // all zero when the broker does not report ids
	Start map[int32]int64
	End   map[int32]int64
}

// StoredOffset is a partition's row in consumer_offsets.
type StoredOffset struct {
	Next    int64
	TopicID *[16]byte // nil until learned
}

// Diagnose says why stored offsets do not belong to the log, or "" when
// they do; detail explains it for a person.
func Diagnose(p int32, stored *StoredOffset, log LogState) (reason, detail string) {
	start, end := log.Start[p], log.End[p]
	switch {
	case stored != nil && stored.TopicID != nil && log.ID != [16]byte{} && *stored.TopicID != log.ID:
		return StopTopicRecreated, fmt.Sprintf("the offsets were stored for topic id %s, the log's topic %s now has id %s (deleted and created again)",
			formatID(*stored.TopicID), log.Topic, formatID(log.ID))
	case stored != nil && stored.Next > end:
		return StopOffsetBeyondEnd, fmt.Sprintf("the stored next offset %d is beyond the end of the partition (%d): the log lost records it had", stored.Next, end)
	case stored != nil && stored.Next < start:
		return StopLogTruncated, fmt.Sprintf("records %d..%d were deleted from the log (it starts at %d) before they were projected", stored.Next, start-1, start)
	case stored == nil && start > 0:
		return StopLogTruncated, fmt.Sprintf("no offset stored and the log starts at %d: records 0..%d were deleted before they were projected", start, start-1)
	}
	return "", ""
}

func formatID(id [16]byte) string { return uuid.UUID(id).String() }

// judge is Diagnose for a log read between two reads of the stored offsets
// (before, after). Both only grow (short of an operator's reset), and so
// do the log's ends: an offset stored before the log was read and beyond
// its end is beyond it for good, and an offset still stored after the log
// was read and below its start was below it then. Each question is asked
// of the read that cannot be stale for it.
func judge(p int32, before, after *StoredOffset, log LogState) (reason, detail string) {
	if r, d := Diagnose(p, before, log); r != "" && r != StopLogTruncated {
		return r, d
	}
	if r, d := Diagnose(p, after, log); r != "" && r != StopOffsetBeyondEnd {
		return r, d
	}
	return "", ""
}

// InspectLog reads the topic's id and offsets.
func InspectLog(ctx context.Context, adm *kadm.Client, topic string) (LogState, error) {
	ls := LogState{Topic: topic, Start: map[int32]int64{}, End: map[int32]int64{}}
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return ls, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	d, ok := td[topic]
	if !ok {
		return ls, fmt.Errorf("metadata of %s: topic not listed", topic)
	}
	if d.Err != nil {
		return ls, fmt.Errorf("metadata of %s: %w", topic, d.Err)
	}
	ls.ID = d.ID
	for _, list := range []struct {
		get func(context.Context, ...string) (kadm.ListedOffsets, error)
		dst map[int32]int64
		say string
	}{{adm.ListStartOffsets, ls.Start, "start"}, {adm.ListEndOffsets, ls.End, "end"}} {
		offs, err := list.get(ctx, topic)
		if err == nil {
			err = offs.Error()
		}
		if err != nil {
			return ls, fmt.Errorf("%s offsets of %s: %w", list.say, topic, err)
		}
		offs.Each(func(o kadm.ListedOffset) { list.dst[o.Partition] = o.Offset })
	}
	return ls, nil
}

const sqlStoredOffsets = `SELECT "partition", next_offset, topic_id FROM consumer_offsets WHERE topic = $1`

// LoadStoredOffsets reads the stored offsets of topic, by partition.
func LoadStoredOffsets(ctx context.Context, pool *pgxpool.Pool, topic string) (map[int32]*StoredOffset, error) {
	rows, err := pool.Query(ctx, sqlStoredOffsets, topic)
	if err != nil {
		return nil, fmt.Errorf("stored offsets of %s: %w", topic, err)
	}
	defer rows.Close()
	out := map[int32]*StoredOffset{}
	for rows.Next() {
		var p int32
		var s StoredOffset
		var id pgtype.UUID
		if err := rows.Scan(&p, &s.Next, &id); err != nil {
			return nil, fmt.Errorf("stored offsets of %s: %w", topic, err)
		}
		if id.Valid {
			b := id.Bytes
			s.TopicID = &b
		}
		out[p] = &s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stored offsets of %s: %w", topic, err)
	}
	return out, nil
}

// sqlLearnTopicID records the log's topic id beside offsets that have none.
// It locks the rows in
// partition order, as the apply transactions lock theirs (projector), so
// that it waits on them rather than deadlocking with them.
const sqlLearnTopicID = `UPDATE consumer_offsets o SET topic_id = $2
FROM (SELECT "partition" FROM consumer_offsets WHERE topic = $1 AND topic_id IS NULL ORDER BY "partition" FOR UPDATE) l
WHERE o.topic = $1 AND o."partition" = l."partition" AND o.topic_id IS NULL`

// PartitionStop is one partition whose projection is stopped.
type PartitionStop struct {
	Partition int32     `json:"partition"`
	Reason    string    `json:"reason"`
	Detail    string    `json:"detail"`
	Since     time.Time `json:"since"`
}

// guard keeps the fanout from applying records that do not continue what
// the stored offsets say was applied. It knows, per owned partition, the
// next offset expected and whether the partition is stopped, and the id of
// the topic the fanout consumes. Safe for concurrent use.
type guard struct {
	mu      sync.Mutex
	topicID [16]byte
	next    map[int32]int64
	stopped map[int32]*PartitionStop
	// resume holds stopped partitions found consistent again, with the
	// offset to resume at; the poll loop applies them.
	resume map[int32]int64
	// recreated says the topic's id changed under the running client.
	recreated bool
	logged    map[int32]time.Time
	kick      chan struct{}
	log       *slog.Logger
	topic     string
	gauge     *prometheus.GaugeVec
}

func newGuard(topic string, log *slog.Logger) *guard {
	return &guard{
		next: map[int32]int64{}, stopped: map[int32]*PartitionStop{}, resume: map[int32]int64{},
		logged: map[int32]time.Time{}, kick: make(chan struct{}, 1), log: log, topic: topic,
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "inboxd", Subsystem: "fanout", Name: "partition_stopped",
			Help: "1 while the partition's projection is stopped because its stored offsets do not belong to the log (reason: topic_recreated, offset_beyond_end, log_truncated, log_rewound)."},
			[]string{"partition", "reason"}),
	}
}

// check asks the checker to look at the log now.
func (g *guard) check() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// setTopicID records the log's topic id. A change from one known id to
// another (the topic deleted and created again under the running fanout)
// asks for a new Kafka client: franz-go does not consume the new topic in
// the same client, and a partition with no stored offsets (which no check
// stops, since nothing of it was applied) would otherwise wait on the old
// topic's id unseen.
func (g *guard) setTopicID(id [16]byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.topicID != [16]byte{} && id != [16]byte{} && id != g.topicID {
		g.recreated = true
	}
	g.topicID = id
}

// assigned records the offsets the partitions start at.
func (g *guard) assigned(start map[int32]int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for p, o := range start {
		g.next[p] = o
	}
}

func (g *guard) forget(parts []int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range parts {
		delete(g.next, p)
		delete(g.resume, p)
		if s := g.stopped[p]; s != nil {
			g.gauge.DeleteLabelValues(strconv.Itoa(int(p)), s.Reason)
			delete(g.stopped, p)
		}
	}
}

// reset forgets every partition (a new client starts over).
func (g *guard) reset() {
	g.mu.Lock()
	parts := make([]int32, 0, len(g.next)+len(g.stopped))
	for p := range g.next {
		parts = append(parts, p)
	}
	for p := range g.stopped {
		parts = append(parts, p)
	}
	g.mu.Unlock()
	g.forget(parts)
}

func (g *guard) owned() []int32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]int32, 0, len(g.next))
	for p := range g.next {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// stop stops partition p; the first time it logs an ERROR, later calls
// at most once a minute.
func (g *guard) stop(p int32, reason, detail string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.resume, p)
	now := time.Now()
	if s := g.stopped[p]; s != nil {
		if now.Sub(g.logged[p]) >= time.Minute {
			g.logged[p] = now
			g.log.Error("partition still stopped: its stored offsets do not belong to the log; run inboxd offsets",
				"topic", g.topic, "partition", p, "reason", s.Reason, "detail", s.Detail, "stopped_for", now.Sub(s.Since).Round(time.Second).String())
		}
		return
	}
	g.stopped[p] = &PartitionStop{Partition: p, Reason: reason, Detail: detail, Since: now}
	g.logged[p] = now
	g.gauge.WithLabelValues(strconv.Itoa(int(p)), reason).Set(1)
	g.log.Error("partition stopped: its stored offsets do not belong to the log, nothing of it is projected until an operator decides (inboxd offsets)",
		"topic", g.topic, "partition", p, "reason", reason, "detail", detail)
}

// release marks a stopped partition consistent again, to resume at next.
func (g *guard) release(p int32, next int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stopped[p]
	if s == nil {
		return
	}
	g.gauge.DeleteLabelValues(strconv.Itoa(int(p)), s.Reason)
	delete(g.stopped, p)
	g.resume[p] = next
	g.next[p] = next
	g.log.Warn("partition resumes: its stored offsets belong to the log again",
		"topic", g.topic, "partition", p, "offset", next, "was", s.Reason)
}

func (g *guard) isStopped(p int32) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stopped[p] != nil
}

func (g *guard) stops() []PartitionStop {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]PartitionStop, 0, len(g.stopped))
	for _, s := range g.stopped {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// filter drops the records of stopped partitions from fetches and stops
// the partitions whose records do not continue the expected offsets or
// come from a topic with another id. It returns the partitions to pause.
func (g *guard) filter(fetches kgo.Fetches) (kept []*kgo.Record, pause []int32) {
	type verdict struct{ reason, detail string }
	bad := map[int32]verdict{}
	g.mu.Lock()
	want := g.topicID
	fetches.EachTopic(func(t kgo.FetchTopic) {
		for _, fp := range t.Partitions {
			if len(fp.Records) == 0 {
				continue
			}
			switch {
			case t.TopicID != [16]byte{} && want != [16]byte{} && t.TopicID != want:
				bad[fp.Partition] = verdict{StopTopicRecreated, fmt.Sprintf("a fetch returned records of topic id %s, the offsets belong to %s", formatID(t.TopicID), formatID(want))}
			case fp.Records[0].Offset < g.next[fp.Partition]:
				bad[fp.Partition] = verdict{StopLogRewound, fmt.Sprintf("a fetch returned offset %d, below the next offset %d already reached", fp.Records[0].Offset, g.next[fp.Partition])}
			}
		}
	})
	g.mu.Unlock()
	for p, v := range bad {
		g.stop(p, v.reason, v.detail)
	}
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		if g.isStopped(fp.Partition) {
			pause = append(pause, fp.Partition)
			return
		}
		kept = append(kept, fp.Records...)
	})
	return kept, pause
}

// advanced records that the partitions' records up to each offset were
// applied.
func (g *guard) advanced(last map[int32]int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for p, o := range last {
		if _, owned := g.next[p]; owned && o+1 > g.next[p] {
			g.next[p] = o + 1
		}
	}
}

// takeRestart says why the poll loop must start a new Kafka client, if it
// must: stopped partitions found consistent again (a new group session
// reloads their offsets), or the topic recreated under the client; ""
// when it need not.
func (g *guard) takeRestart() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	why := ""
	switch {
	case g.recreated:
		why = "the topic was deleted and created again: a new client consumes the new topic (partitions with stored offsets stay stopped at assignment)"
	case len(g.resume) > 0:
		why = "partitions stopped by the log check belong to the log again"
	}
	g.recreated = false
	if len(g.resume) > 0 {
		g.resume = map[int32]int64{}
	}
	return why
}

// checkLog compares the stored offsets of the owned partitions with the
// log, stops those that do not belong to it, releases stopped ones that
// do again (after an operator's reset), learns the topic id where none is
// stored, and refreshes the lag gauge from the log's end offsets (so it
// keeps moving while a partition is stuck).
func (f *Fanout) checkLog(ctx context.Context, adm *kadm.Client) error {
	owned := f.guard.owned()
	if len(owned) == 0 {
		return nil
	}
	// The stored offsets are read before and after the log: records
	// appended and projected between the log's read and a single read of
	// the offsets would put a stored offset past a stale end (a partition
	// stopped for nothing: TestTopicRecreatedUnderARunningFanout against
	// Kafka 4.1.1 in CI). See judge.
	before, err := LoadStoredOffsets(ctx, f.pool, f.cfg.Topic)
	if err != nil {
		return err
	}
	ls, err := InspectLog(ctx, adm, f.cfg.Topic)
	if err != nil {
		return err
	}
	f.guard.setTopicID(ls.ID)
	stored, err := LoadStoredOffsets(ctx, f.pool, f.cfg.Topic)
	if err != nil {
		return err
	}
	for _, p := range owned {
		st := stored[p]
		if reason, detail := judge(p, before[p], st, ls); reason != "" {
			f.guard.stop(p, reason, detail)
			continue
		}
		next := int64(0)
		if st != nil {
			next = st.Next
		} else {
			next = ls.Start[p]
		}
		if f.guard.isStopped(p) {
			f.guard.release(p, next)
		}
		f.m.lag.WithLabelValues(strconv.Itoa(int(p))).Set(float64(ls.End[p] - next))
	}
	if ls.ID != [16]byte{} {
		if _, err := f.pool.Exec(ctx, sqlLearnTopicID, f.cfg.Topic, pgtype.UUID{Bytes: ls.ID, Valid: true}); err != nil {
			return fmt.Errorf("store the topic id of %s: %w", f.cfg.Topic, err)
		}
	}
	return nil
}

// runLogChecks runs checkLog every LogCheckInterval and whenever kicked,
// until ctx ends.
func (f *Fanout) runLogChecks(ctx context.Context) {
	adm := f.adm
	t := time.NewTicker(f.cfg.LogCheckInterval)
	defer t.Stop()
	var lastErr time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-f.guard.kick:
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f.checkLog(cctx, adm)
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) && time.Since(lastErr) >= time.Minute {
			lastErr = time.Now()
			f.cfg.Logger.Warn("checking the stored offsets against the log failed (logged once a minute)", "topic", f.cfg.Topic, "err", err)
		}
	}
}

// nextOffsets returns the next offset of each owned partition that is not
// stopped.
func (g *guard) nextOffsets() map[int32]int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[int32]int64, len(g.next))
	for p, o := range g.next {
		if g.stopped[p] == nil {
			out[p] = o
		}
	}
	return out
}

// StoppedError is Fanout.Ready's answer while partitions are stopped.
type StoppedError struct {
	Partitions []PartitionStop `json:"partitions"`
}

func (e *StoppedError) Error() string {
	var b strings.Builder
	b.WriteString("stopped: ")
	for i, p := range e.Partitions {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "partition %d %s: %s", p.Partition, p.Reason, p.Detail)
	}
	return b.String()
}

// ReadyStatus is the status /readyz reports with this error.
func (e *StoppedError) ReadyStatus() string { return "stopped" }

// rateLog logs a message at most once per interval per key, counting what
// it left out (a broker outage must not write thousands of lines a second).
type rateLog struct {
	log   *slog.Logger
	every time.Duration
	mu    sync.Mutex
	last  map[string]time.Time
	quiet map[string]int
}

func newRateLog(log *slog.Logger, every time.Duration) *rateLog {
	return &rateLog{log: log, every: every, last: map[string]time.Time{}, quiet: map[string]int{}}
}

// Warn logs msg for key unless it was logged less than the interval ago.
func (r *rateLog) Warn(key, msg string, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if now.Sub(r.last[key]) < r.every {
		r.quiet[key]++
		r.mu.Unlock()
		return
	}
	r.last[key] = now
	n := r.quiet[key]
	delete(r.quiet, key)
	if len(r.last) > 10000 {
		clear(r.last)
	}
	r.mu.Unlock()
	if n > 0 {
		args = append(args, "repeated_since_last_line", n)
	}
	r.log.Warn(msg, args...)
}

// AutoInstanceID, as Config.InstanceID in cmd/inboxd, asks for an id
// derived with InstanceIDFor.
const AutoInstanceID = "auto"

// InstanceIDFor derives a static membership id from the host name and the
// port of the process's ops address: stable across restarts of a container
// or pod (which keep their host name), and unique among running processes,
// since two processes cannot listen on one port of one host. It returns ""
// (dynamic membership) when either is unknown or the port is 0.
func InstanceIDFor(hostname, opsAddr string) string {
	_, port, err := net.SplitHostPort(opsAddr)
	if hostname == "" || err != nil || port == "" || port == "0" {
		return ""
	}
	return "fanout-" + hostname + "-" + port
}
