// Package fanout is the consumer-group service that feeds the log into the
// projector exactly once. Offsets live in PostgreSQL, written in the
// projecting transaction; on assignment the consumer resumes from them
// (AdjustFetchOffsetsFn), polls with rebalances blocked until the batch is
// committed (BlockRebalanceOnPoll), and never commits to Kafka for
// correctness. A zombie that still holds a batch after a rebalance is fenced
// by the projector's offset check. Records that cannot be decoded go to the
// DLQ topic with the reason in the "reason" header; transient PostgreSQL
// failures are retried with capped exponential backoff. It must not hold
// projection logic (that is projector's).
package fanout
