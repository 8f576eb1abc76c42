package analytics

import (
	"math"
	"time"
)

// Figures is a snapshot of what analytics counted. Totals cover the records
// this process counted (from the group's committed offset at assignment
// on); the window covers replayed records too.
type Figures struct {
	// At is when the snapshot was taken; the window ends here.
	At time.Time
	// Window is the length of the sliding window.
	Window time.Duration

	// Records counted, valid or not.
	Records int64
	// Replayed records: below the committed offset at assignment, read again
	// for membership and the window but not counted.
	Replayed int64
	// Invalid counted records of a decoded type that events.Decode refused
	// or whose body type differs from the header. They count in Events (by
	// header) and nowhere else.
	Invalid int64
	// Events counts records by their "type" header (TypeUnknown for a
	// missing or unknown one), valid or not.
	Events map[string]int64
	// Messages is the number of valid message.sent records.
	Messages int64
	// NonMemberMessages are the Messages fanout rejects: the sender is not a
	// member or the conversation is unknown.
	NonMemberMessages int64
	// MutedMessages are the Messages fanout rejects because their sender
	// is muted (docs/protocol.md, "Ban and mute").
	MutedMessages int64

	// WindowMessages are the messages whose "at" is inside the window.
	WindowMessages int64
	// MessagesPerMinute is WindowMessages scaled to one minute.
	MessagesPerMinute float64
	// ActiveConversations have a message inside the window.
	ActiveConversations int
	// Conversations whose membership analytics tracks (created in the
	// assigned partitions).
	Conversations int

	// FanOut is the distribution of recipients per message: the members of
	// the conversation at the send, the sender included; 0 for a rejected
	// send (a non-member's or a muted member's). Its Sum is the number of inbox rows fanout writes for text
	// messages.
	FanOut Histogram
	// TopSenders by Messages, most first, ties by the lower user id.
	TopSenders []Sender

	// Positions are the next offsets of the assigned partitions.
	Positions map[int32]int64
}

// Histogram is a distribution over upper bounds.
type Histogram struct {
	// Bounds are the inclusive upper bounds of the buckets.
	Bounds []float64
	// Counts per bucket (not cumulative); the last one counts what is above
	// every bound.
	Counts []uint64
	// Count and Sum of the observations.
	Count uint64
	Sum   int64
}

// Quantile returns the upper bound of the bucket holding quantile q (0..1),
// +Inf when it is above every bound, and 0 without observations.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	var cum uint64
	for i, c := range h.Counts {
		cum += c
		if float64(cum) >= rank && c > 0 || i == len(h.Counts)-1 {
			if i == len(h.Bounds) {
				return math.Inf(1)
			}
			return h.Bounds[i]
		}
	}
	return math.Inf(1)
}

// Sender is one of the top senders.
type Sender struct {
	UserID   int64
	Messages int64
}
