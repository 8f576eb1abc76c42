// Package analytics is the example consumer of the event log: it reads
// inboxd.events in its own Kafka consumer group (committing to Kafka) and
// keeps live figures in memory — messages per minute and active
// conversations over a sliding window, the fan-out size of every message,
// the top senders and totals by event type — served as Prometheus metrics
// and as a printable table.
//
// What it counts is the log, not the projections: every valid message.sent
// record is a message, including the sends fanout rejects (a non-member's or
// to an unknown conversation, and a muted member's, each counted
// separately, with fan-out size 0) and a record appended twice. Records are filtered on the "type" header before
// decoding: record.updated, read.updated and unknown types are counted from
// the header alone and never decoded.
//
// Fan-out sizes need membership, which analytics derives itself from
// conversation.created and the member.* events (roles, bans and mutes
// included) with the projection's rules, calling package projection's
// functions so that the two cannot drift (docs/events.md). State is kept per partition (a conversation lives in
// one partition), so on every assignment a partition is read from its start:
// records below the group's committed offset are replayed for membership and
// for the sliding window only; counting starts at the committed offset. So a
// restarted process resumes its totals where the group left them (totals are
// per process, like every Prometheus counter, and sum correctly across the
// members of a group), and its fan-out sizes and window are right from the
// first counted record. The price is reading the whole partition on each
// assignment.
//
// It must not touch fanout's progress: it needs no database, and it never
// joins fanout's consumer group.
package analytics
