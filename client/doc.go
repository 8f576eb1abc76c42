// Package client is the Go SDK of inboxd: one device of one user, kept in
// sync with its inbox over the protocol of docs/protocol.md, as an app embeds it
// (and as the inboxd CLI, the load generators and the benchmarks use it).
// It implements the protocol's "well-behaved client": it persists its
// position, reconnects with jittered backoff, honours Retry-After and the
// polling hints, stops on permanent errors, repairs gaps, recovers from
// too_long and retries sends idempotently.
//
// It owns the client side only: it talks to a gateway over HTTP and
// WebSocket and never to Kafka or PostgreSQL, and it keeps no state but the
// State its Store saves.
//
// # Use
//
//	c, err := client.New(client.Config{
//		BaseURL: "https://chat.example.com",
//		Token:   token,
//		Store:   store, // client.OpenFileStore(path), or your own
//		Handler: client.Handler{OnEntry: func(ctx context.Context, e client.Entry) error { … }},
//	})
//	go c.Run(ctx)                          // until ctx ends or a permanent error
//	id, err := c.Send(ctx, conversationID, "hi") // queued and saved at once
//	res, err := c.WaitSent(ctx, id)              // its seq, or a refusal
//	page, err := c.Backfill(ctx, conversationID) // older history after a too_long
//	res2, err := c.Edit(ctx, conversationID, seq, "hi!") // also Delete, React, Unreact
//
// The examples (a send, a sync loop on a FileStore, a too_long handler) run
// as tests against a real dev gateway; examples/chat in the repository is a
// small terminal chat on the package.
//
// # Delivery guarantees
//
// OnEntry receives the inbox entries in inbox_seq order, each once, from one
// goroutine at a time. The cursor moves past an entry only after OnEntry
// returned nil for it, and is saved every Config.CommitEvery entries (1 by
// default). So:
//
//   - Within a process, and across clean restarts (Run returning), every
//     entry is delivered exactly once.
//   - After a crash (or a failed save) between the handler's return and the
//     save, the entries since the last save are delivered again: at most
//     CommitEvery entries, at-least-once. An app that must never see one
//     twice either makes OnEntry idempotent by InboxSeq, or implements Store
//     on its own database and saves the State in the transaction that
//     applies the entries (Save is called right after the handler).
//   - An error from OnEntry stops Run; that entry is delivered again by the
//     next Run.
//
// Messages are also delivered once across OnEntry and Backfill: a message
// the app got from Backfill is skipped when its inbox entry comes, and vice
// versa (the history holes record which seqs are still missing).
//
// A message's changes (edit, delete, reactions) come as update entries. The
// client keeps, per changed message, the highest version the app was
// handed, and calls Handler.OnUpdate only with a higher one: an app that
// builds its view from OnEntry's messages, OnHistory and OnUpdate sees each
// change once and ends with the server's current state, also after a
// too_long (Backfill then reads the messages delivered before the jump
// again, for the changes it skipped).
//
// # Transport
//
// Run uses the WebSocket (hello with the cursor, catch-up pages, live
// pushes, heartbeats) and falls back to HTTP long-polling
// (GET /v1/sync?wait=) after Config.WSFallbackAfter failed WebSocket
// sessions in a row, or at once when the path refuses upgrades; after
// Config.PollingPeriod it tries the WebSocket again. Each session carries
// the inbox; HTTP pulls repair it: a push that skips ahead of the cursor
// is buffered for Config.GapWait (pushes can come out of order across
// reconnects), then the gap is pulled over HTTP; a heartbeat whose head
// is beyond the cursor is followed by a pull when no push arrives within
// Config.HeadWait.
//
// # Failures
//
// Temporary failures (network errors, 408, 429, 5xx, WebSocket close codes
// other than 4001 and 4003) never end Run. Reconnections wait a capped
// exponential backoff with full jitter (uniform in [0, cap]), which is only
// reset by a connection that stayed up for Config.StablePeriod; a server's
// Retry-After (or retry_after_ms) replaces the backoff; Config.BreakerThreshold
// failures in a row open a circuit for Config.BreakerCooldown, after which
// one attempt probes. Permanent refusals (HTTP 400, 401, 403, 404; close
// 4001, 4003) end Run with a *PermanentError. See docs/client.md.
//
// # Layout
//
//	client.go          Client, New, Run and the sync loop, single requests
//	config.go          Config, Handler, Status and their defaults
//	inbox.go           ordered delivery, too_long, holes, Backfill, Sync
//	outbox.go          Send, SendReply, WaitSent and the send loop
//	change.go          Edit, Delete, React, Unreact: the changes of a message
//	transport_ws.go    a WebSocket session
//	transport_poll.go  a long-poll session
//	api.go             the HTTP requests
//	retry.go           backoff, Retry-After and the circuit breaker
//	store.go           State, Store, MemoryStore
//	filestore.go       FileStore (atomic write-rename, fsync, lock)
//	holes.go           history holes
//	large.go           read-mode conversations: their history, read by the client
//	hints.go           the gateway's reconnect hints, followed instead of the backoff
//	receipts.go        Counts, MarkRead, read receipts
//	members.go         the member list, adding and removing members, roles
//	ephemeral.go       typing, presence and the user's settings
//	attachments.go     Upload (sealed, streamed to the store, in parts that resume), Download
//	report.go          ReportMessage: a message reported to the moderators
//	blocks.go          BlockUser, UnblockUser, Blocks; blocked senders' messages hidden
//	search.go          Search, SearchPages: full-text search of the user's messages
//	flock_unix.go      the lock of a FileStore's state file (flock)
//	flock_other.go     no lock where flock is missing
//	errors.go          APIError, CloseError, PermanentError
//	types.go           the protocol's objects
package client
