// Package fanout is the consumer-group service that feeds the log into the
// projector exactly once. Offsets live in PostgreSQL, written in the
// projecting transaction; on assignment the consumer resumes from them
// (AdjustFetchOffsetsFn), polls with rebalances blocked until the batch is
// committed (BlockRebalanceOnPoll), and commits to Kafka only for tooling.
// A zombie that still holds a batch after a rebalance is fenced by the
// projector's offset check.
//
// Files: fanout.go (config, the poll loop, decoding), apply.go (applying a
// poll, the failure classes, isolating and dead-lettering a record),
// logcheck.go (the stored offsets against the log: topic id, start and end;
// stopping and releasing partitions), offsets.go (`inboxd offsets`),
// health.go (per-partition stuck state for /readyz and metrics), group.go
// (client options, Kafka commits, leaving the group), metrics.go, locks.go,
// retention.go, deliveries.go (a sharded server's relay of its outbox and
// its user stage: the Deliverer), settle.go (a move's settle-out:
// ApplyWaiting applies a partition's waiting deliveries on its target).
//
// Records that cannot be decoded, or that the database refuses for their own
// data after bounded attempts, go to the DLQ topic with the reason in the
// "reason" header; transient and systemic failures are retried with capped
// backoff and never dead-lettered. It must not hold projection logic (that
// is projector's) nor skip a record it has not seen.
package fanout
