// Package projector applies decoded events to the PostgreSQL projections. It
// owns the projection rules (conversation seqs, membership spans, per-user
// inboxes, records, rejections) and the exactly-once bookkeeping (stored
// offsets), and ends every batch with the NOTIFY of the users whose heads
// moved. It is pure with respect to Kafka: fanout (live) and replay (rebuild)
// feed it records; it must not consume or produce.
//
// The projection rules (events to rows, in memory) take no database and
// are unit-tested on their own; loading the state a batch depends on and
// writing its rows are separate steps around them, so that a batch costs
// a fixed number of round trips whatever its size. Invariants I1-I8 are
// checked by Verify, used by the tests and `inboxd verify`.
//
// # Transactions and locks
//
// Apply runs one transaction per batch. Rows are locked in one global order:
// consumer offsets by partition, then conversations by id, then users by id.
// Every writer of these tables follows that order, so two fanout processes
// (or a fanout and a zombie) can block each other but never deadlock.
// Membership and record rows of a conversation are only written by the
// partition that owns the conversation, which the offset lock serialises.
//
// # Several servers
//
// With Config.Users set (a sharded deployment, docs/scaling.md), Apply is
// the conversation stage: the entries of users on other servers leave as
// deliveries in the batch's outbox rows (deliveries.go), and
// ApplyDeliveries is the user stage that applies them on the users'
// server, exactly once by the marks of their sources (userstage.go). Its
// locks: the deliveries topic's offsets, the marks, then users, so that
// the two stages never wait for each other in a cycle. With
// Config.PlacementVersion set, both stages first take the server's
// placement fence shared and refuse a batch of an older placement than
// the fence (the fence of a move).
//
// # Notifications
//
// The last statements of the transaction are pg_notify on Config.Channel
// (default projection.DefaultChannel), delivered if and only if the batch
// commits. Their payloads, like the stored kinds and reasons and the
// advisory-lock keys, are the contract with the read side and are declared
// in package projection, which the gateway reads them with.
package projector
