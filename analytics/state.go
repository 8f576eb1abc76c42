package analytics

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

// TypeUnknown is the events_total label of records whose "type" header is
// missing or names no known event type.
const TypeUnknown = "unknown"

// Types lists the label values of events_total, in table order: every
// event type, then TypeUnknown.
func Types() []string {
	return []string{events.ConversationCreated, events.MemberAdded, events.MemberRemoved,
		events.MessageSent, events.RecordUpdated, events.ReadUpdated,
		events.MessageEdited, events.MessageDeleted, events.ReactionAdded, events.ReactionRemoved,
		events.MessageThumbnailed, events.MessageReported, events.ReportResolved, events.MemberRoleSet,
		events.MemberBanned, events.MemberUnbanned, events.MemberMuted, events.MemberUnmuted, TypeUnknown}
}

// errHeaderMismatch is the reason of a record whose body is another type
// than its header says.
var errHeaderMismatch = errors.New("body type differs from the type header")

// replaySlack widens the window when deciding from a replayed record's
// timestamp (the producer's clock) whether its "at" (the gateway's clock)
// may fall inside the window.
const replaySlack = time.Minute

// headerType returns the "type" header if it is one of known (the keys
// of events_total), or TypeUnknown.
func headerType(hs []kgo.RecordHeader, known map[string]int64) string {
	for _, h := range hs {
		if h.Key != events.HeaderType {
			continue
		}
		if _, ok := known[string(h.Value)]; ok {
			return string(h.Value)
		}
		return TypeUnknown
	}
	return TypeUnknown
}

// needsBody reports whether records of a type are decoded: what changes
// membership (membership.go) and messages. The others are counted from
// the header alone.
func needsBody(typ string) bool {
	switch typ {
	case events.ConversationCreated, events.MemberAdded, events.MemberRemoved, events.MemberRoleSet,
		events.MemberBanned, events.MemberUnbanned, events.MemberMuted, events.MemberUnmuted, events.MessageSent:
		return true
	}
	return false
}

// partition is what analytics knows about one partition of the topic.
// Conversations live in one partition, so this state is dropped when the
// partition is revoked and rebuilt when it is assigned.
type partition struct {
	// resumeAt is the group's committed offset at assignment: records below
	// it are replayed (membership and window), records from it on counted.
	resumeAt int64
	// next is the offset after the last record handled (0 before the
	// first: an assigned partition is read from its start).
	next int64
	// convs are the conversations created in this partition.
	convs map[int64]*conv
	// perSec counts messages by the unix second of their "at", inside the window.
	perSec map[int64]int64
	// active is the unix second of each conversation's latest message inside
	// the window.
	active map[int64]int64
}

func newPartition(resumeAt int64) *partition {
	return &partition{resumeAt: resumeAt, convs: map[int64]*conv{},
		perSec: map[int64]int64{}, active: map[int64]int64{}}
}

// recipients is the fan-out of a message: every member, the sender
// included, or 0 when the projection refuses it: refused is
// projection.ReasonNotMember (a non-member's send, or to an unknown
// conversation) or projection.ReasonMuted.
func (p *partition) recipients(e *events.Event) (n int, refused string) {
	c := p.convs[e.ConversationID]
	switch {
	case c == nil || e.ActorID != 0 && !c.isMember(e.ActorID):
		return 0, projection.ReasonNotMember
	case c.muted(e):
		return 0, projection.ReasonMuted
	}
	return len(c.members), ""
}

// state holds the figures. It is not safe for concurrent use; Analytics
// guards it.
type state struct {
	window  int64 // seconds
	maxBody int
	bounds  []float64
	topN    int

	parts     map[int32]*partition
	records   int64 // counted
	replayed  int64
	invalid   int64
	events    map[string]int64
	messages  int64
	nonMember int64
	muted     int64
	senders   map[int64]int64
	buckets   []uint64 // per bound, then +Inf; not cumulative
	fanSum    int64
	lastPrune int64
}

func newState(window time.Duration, maxBody int, bounds []float64, topN int) *state {
	ev := map[string]int64{}
	for _, t := range Types() {
		ev[t] = 0
	}
	return &state{window: int64(window / time.Second), maxBody: maxBody, bounds: bounds, topN: topN,
		parts: map[int32]*partition{}, events: ev, senders: map[int64]int64{},
		buckets: make([]uint64, len(bounds)+1), lastPrune: -1 << 62}
}

// inWindow reports whether unix second sec is inside the window ending at
// nowSec. Seconds after now (a gateway clock ahead of ours) are inside.
func (s *state) inWindow(sec, nowSec int64) bool { return sec > nowSec-s.window }

// handle takes one record of partition p. counted is false for a replayed
// record; err says why a decoded record was refused.
func (s *state) handle(p *partition, r *kgo.Record, now time.Time) (counted bool, err error) {
	p.next = r.Offset + 1
	typ := headerType(r.Headers, s.events)
	counted = r.Offset >= p.resumeAt
	if counted {
		s.records++
		s.events[typ]++
	} else {
		s.replayed++
	}
	if !needsBody(typ) {
		return counted, nil
	}
	// A replayed message matters only to the window: decode it only if its
	// record timestamp says it may be inside.
	if !counted && typ == events.MessageSent && !r.Timestamp.IsZero() &&
		r.Timestamp.Before(now.Add(-time.Duration(s.window)*time.Second-replaySlack)) {
		return counted, nil
	}
	e, err := events.Decode(r.Value, s.maxBody)
	if err == nil && e.Type != typ {
		err = fmt.Errorf("%w: header %q, body %q", errHeaderMismatch, typ, e.Type)
	}
	if err != nil {
		if counted {
			s.invalid++
		}
		return counted, err
	}
	if e.Type != events.MessageSent {
		p.apply(e)
		return counted, nil
	}
	if sec := e.At.Unix(); s.inWindow(sec, now.Unix()) {
		p.perSec[sec]++
		if p.active[e.ConversationID] < sec {
			p.active[e.ConversationID] = sec
		}
	}
	if counted {
		n, refused := p.recipients(e)
		s.messages++
		switch refused {
		case projection.ReasonNotMember:
			s.nonMember++
		case projection.ReasonMuted:
			s.muted++
		}
		s.senders[e.ActorID]++
		s.observe(n)
	}
	return counted, nil
}

func (s *state) observe(n int) {
	i, _ := slices.BinarySearch(s.bounds, float64(n))
	s.buckets[i]++
	s.fanSum += int64(n)
}

// prune forgets what left the window; at most once a second unless forced.
func (s *state) prune(now time.Time, force bool) {
	nowSec := now.Unix()
	if !force && nowSec == s.lastPrune {
		return
	}
	s.lastPrune = nowSec
	for _, p := range s.parts {
		for sec := range p.perSec {
			if !s.inWindow(sec, nowSec) {
				delete(p.perSec, sec)
			}
		}
		for c, sec := range p.active {
			if !s.inWindow(sec, nowSec) {
				delete(p.active, c)
			}
		}
	}
}

// snapshot returns the figures at now.
func (s *state) snapshot(now time.Time) Figures {
	s.prune(now, true)
	f := Figures{
		At: now, Window: time.Duration(s.window) * time.Second,
		Records: s.records, Replayed: s.replayed, Invalid: s.invalid,
		Events: make(map[string]int64, len(s.events)), Messages: s.messages, NonMemberMessages: s.nonMember, MutedMessages: s.muted,
		FanOut:    Histogram{Bounds: slices.Clone(s.bounds), Counts: slices.Clone(s.buckets), Sum: s.fanSum},
		Positions: make(map[int32]int64, len(s.parts)),
	}
	for t, n := range s.events {
		f.Events[t] = n
	}
	for _, c := range s.buckets {
		f.FanOut.Count += c
	}
	for id, p := range s.parts {
		f.Positions[id] = p.next
		f.Conversations += len(p.convs)
		f.ActiveConversations += len(p.active)
		for _, n := range p.perSec {
			f.WindowMessages += n
		}
	}
	f.MessagesPerMinute = float64(f.WindowMessages) * float64(time.Minute) / float64(f.Window)
	f.TopSenders = topSenders(s.senders, s.topN)
	return f
}

// topSenders returns the n senders with the most messages, ties broken by
// the lower user id.
func topSenders(senders map[int64]int64, n int) []Sender {
	top := make([]Sender, 0, n+1)
	for u, c := range senders {
		if len(top) == n && !before(Sender{u, c}, top[n-1]) {
			continue
		}
		i, _ := slices.BinarySearchFunc(top, Sender{u, c}, func(a, b Sender) int {
			if before(a, b) {
				return -1
			}
			return 1
		})
		top = slices.Insert(top, i, Sender{u, c})
		if len(top) > n {
			top = top[:n]
		}
	}
	return top
}

func before(a, b Sender) bool {
	return a.Messages > b.Messages || a.Messages == b.Messages && a.UserID < b.UserID
}
