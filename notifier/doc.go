// Package notifier notifies members who are not connected of new messages
// through the operator's webhook (docs/notifications.md): a consumer group
// on the event log that, once the fanout has projected a message, queues a
// notification per member to reach (not the sender, not a muted
// conversation unless mentioned, not a user with notifications off) in the
// transaction that stores its progress, and workers that deliver the due
// ones, skipping members connected by then, signed, with retries.
package notifier
