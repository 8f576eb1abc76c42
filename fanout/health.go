package fanout

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// partitions keeps, per assigned partition, what an operator must see when
// the partition stops moving: since when its oldest fetched record waits to
// be projected, and whether its batches are failing. It is read at scrape
// time, so the age keeps growing during a stall rather than freezing at the
// last batch. Safe for concurrent use.
type partitions struct {
	mu    sync.Mutex
	parts map[int32]*partState
	now   func() time.Time

	ageDesc, failingDesc, attemptsDesc *prometheus.Desc
}

type partState struct {
	// oldest is the timestamp of the oldest record fetched and not yet
	// projected; zero when the partition is caught up with its fetches.
	oldest time.Time
	// failingSince is the first failure of the partition's current batch;
	// zero when its last attempt succeeded.
	failingSince time.Time
	offset       int64 // the first offset of the failing batch
	attempts     int
	class        string
	lastErr      string
}

func newPartitions() *partitions {
	return &partitions{
		parts: map[int32]*partState{},
		now:   time.Now,
		ageDesc: prometheus.NewDesc("inboxd_fanout_oldest_unprojected_seconds",
			"Age of the oldest record of the partition fetched but not projected yet (0 when caught up with its fetches); grows during a stall.",
			[]string{"partition"}, nil),
		failingDesc: prometheus.NewDesc("inboxd_fanout_partition_failing",
			"1 while the partition's current batch is failing to apply (retried or being isolated), else 0.",
			[]string{"partition"}, nil),
		attemptsDesc: prometheus.NewDesc("inboxd_fanout_partition_failed_attempts",
			"Failed attempts of the partition's current batch (0 when its last attempt succeeded).",
			[]string{"partition"}, nil),
	}
}

func (ps *partitions) get(p int32) *partState {
	s := ps.parts[p]
	if s == nil {
		s = &partState{}
		ps.parts[p] = s
	}
	return s
}

// fetched records that partition p has records waiting since ts.
func (ps *partitions) fetched(p int32, ts time.Time) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if s := ps.get(p); s.oldest.IsZero() || ts.Before(s.oldest) {
		s.oldest = ts
	}
}

// projected records that every fetched record of the partitions is
// applied (or dead-lettered): they are caught up and no longer failing.
func (ps *partitions) projected(parts []int32) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range parts {
		*ps.get(p) = partState{}
	}
}

// failed records a failed attempt of a batch starting at offsets (first
// offset per partition) and returns whether it is the first failure of any
// of them (for logging once).
func (ps *partitions) failed(first map[int32]int64, class string, err error) (firstFailure bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	now := ps.now()
	for p, off := range first {
		s := ps.get(p)
		if s.failingSince.IsZero() {
			s.failingSince, firstFailure = now, true
		}
		s.offset, s.class, s.lastErr = off, class, err.Error()
		s.attempts++
	}
	return firstFailure
}

// forget drops partitions this process no longer owns.
func (ps *partitions) forget(parts []int32) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range parts {
		delete(ps.parts, p)
	}
}

// Degraded lists the failing partitions, oldest failure first; empty when
// every partition's last attempt succeeded.
func (ps *partitions) degraded() []PartitionFailure {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	now := ps.now()
	var out []PartitionFailure
	for p, s := range ps.parts {
		if s.failingSince.IsZero() {
			continue
		}
		out = append(out, PartitionFailure{Partition: p, Offset: s.offset, Attempts: s.attempts, Class: s.class,
			FailingFor: now.Sub(s.failingSince), FailingSeconds: now.Sub(s.failingSince).Seconds(), Error: s.lastErr})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FailingFor > out[j].FailingFor })
	return out
}

func (ps *partitions) Describe(ch chan<- *prometheus.Desc) {
	ch <- ps.ageDesc
	ch <- ps.failingDesc
	ch <- ps.attemptsDesc
}

func (ps *partitions) Collect(ch chan<- prometheus.Metric) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	now := ps.now()
	for p, s := range ps.parts {
		label := strconv.Itoa(int(p))
		age, failing := 0.0, 0.0
		if !s.oldest.IsZero() {
			age = max(now.Sub(s.oldest).Seconds(), 0)
		}
		if !s.failingSince.IsZero() {
			failing = 1
		}
		ch <- prometheus.MustNewConstMetric(ps.ageDesc, prometheus.GaugeValue, age, label)
		ch <- prometheus.MustNewConstMetric(ps.failingDesc, prometheus.GaugeValue, failing, label)
		ch <- prometheus.MustNewConstMetric(ps.attemptsDesc, prometheus.GaugeValue, float64(s.attempts), label)
	}
}

// PartitionFailure is one partition whose current batch keeps failing.
type PartitionFailure struct {
	Partition  int32         `json:"partition"`
	Offset     int64         `json:"offset"` // the first offset of the failing batch
	Attempts   int           `json:"attempts"`
	Class      string        `json:"class"` // transient, data or systemic (projector.Class)
	FailingFor time.Duration `json:"-"`
	// FailingSeconds is FailingFor in seconds, for /readyz.
	FailingSeconds float64 `json:"failing_seconds"`
	Error          string  `json:"error"`
}

// DegradedError is Fanout.Ready's answer while partitions are failing.
type DegradedError struct {
	Partitions []PartitionFailure `json:"partitions"`
}

// ReadyStatus is the status /readyz reports with this error.
func (e *DegradedError) ReadyStatus() string { return "degraded" }

func (e *DegradedError) Error() string {
	var b strings.Builder
	b.WriteString("degraded: ")
	for i, p := range e.Partitions {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "partition %d failing for %s at offset %d (%d attempts, %s): %s",
			p.Partition, p.FailingFor.Round(time.Millisecond), p.Offset, p.Attempts, p.Class, p.Error)
	}
	return b.String()
}
