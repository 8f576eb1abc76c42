package analytics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exposes a Snapshot per scrape, so that the metrics and the
// printed table never disagree and series of senders who left the top
// disappear.
type collector struct {
	a                                                        *Analytics
	records, replayed, invalid, events, messages, nonMember  *prometheus.Desc
	muted                                                    *prometheus.Desc
	windowMessages, perMinute, active, conversations, fanOut *prometheus.Desc
	topSender                                                *prometheus.Desc
}

func newCollector(a *Analytics) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("inboxd", "analytics", name), help, labels, nil)
	}
	return &collector{
		a:              a,
		records:        d("records_total", "Records counted (from the committed offset at assignment on), valid or not."),
		replayed:       d("replayed_records_total", "Records below the committed offset read again for membership and the window, not counted."),
		invalid:        d("invalid_records_total", "Counted records of a decoded type that are not valid events (or whose body type differs from the type header)."),
		events:         d("events_total", "Counted records by their type header, valid or not.", "type"),
		messages:       d("messages_total", "Valid message.sent records, non-members' included."),
		nonMember:      d("non_member_messages_total", "message.sent records fanout rejects: the sender is not a member or the conversation is unknown."),
		muted:          d("muted_messages_total", "message.sent records fanout rejects because the sender is muted."),
		windowMessages: d("window_messages", "Messages whose event time is inside the sliding window."),
		perMinute:      d("messages_per_minute", "Messages inside the sliding window, scaled to one minute."),
		active:         d("active_conversations", "Conversations with a message inside the sliding window."),
		conversations:  d("conversations", "Conversations whose membership is tracked (created in the assigned partitions)."),
		fanOut:         d("fanout_size", "Recipients per message: members at the send, sender included; 0 for a rejected send."),
		topSender:      d("top_sender_messages", "Messages of the top senders, rank 1 the most.", "rank", "user_id"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.records, c.replayed, c.invalid, c.events, c.messages, c.nonMember, c.muted,
		c.windowMessages, c.perMinute, c.active, c.conversations, c.fanOut, c.topSender} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	f := c.a.Snapshot()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(c.records, f.Records)
	counter(c.replayed, f.Replayed)
	counter(c.invalid, f.Invalid)
	for t, n := range f.Events {
		counter(c.events, n, t)
	}
	counter(c.messages, f.Messages)
	counter(c.nonMember, f.NonMemberMessages)
	counter(c.muted, f.MutedMessages)
	gauge(c.windowMessages, float64(f.WindowMessages))
	gauge(c.perMinute, f.MessagesPerMinute)
	gauge(c.active, float64(f.ActiveConversations))
	gauge(c.conversations, float64(f.Conversations))
	buckets := make(map[float64]uint64, len(f.FanOut.Bounds))
	var cum uint64
	for i, b := range f.FanOut.Bounds {
		cum += f.FanOut.Counts[i]
		buckets[b] = cum
	}
	ch <- prometheus.MustNewConstHistogram(c.fanOut, f.FanOut.Count, float64(f.FanOut.Sum), buckets)
	for i, s := range f.TopSenders {
		gauge(c.topSender, float64(s.Messages), strconv.Itoa(i+1), strconv.FormatInt(s.UserID, 10))
	}
}
