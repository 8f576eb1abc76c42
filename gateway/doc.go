// Package gateway serves the client protocol of docs/protocol.md over HTTP: sync
// and long-poll of a user's inbox, the conversation list, history, sends and
// the membership/record changes, plus health, readiness, metrics and the
// OpenAPI document, and mounts the WebSocket endpoint. It reads the
// PostgreSQL projections and appends events through producer; it must not
// write projections (that is projector's) nor consume the log. It reads
// what the projector writes (the notifications, the stored kinds and
// reasons) through package projection, the contract between the two sides,
// and must not import projector, the write engine, nor web, the demo page
// (`inboxd dev` mounts it through Config.Pages). The wire types, error
// codes, frame types and close codes are package protocol's; the gateway
// declares none of its own.
//
// # Layout
//
// The package is the composition root of smaller ones, which it wires in
// New and none of which refers back to it:
//
//	hub/      the notification hub: one LISTEN connection, subscriptions
//	          by user and by event, the head cache
//	inbox/    the inbox reader: batched reads of entries after a cursor,
//	          the too-long rules (Sync), the entries' wire form, the raw
//	          integer and array decoding, the message cache
//	ws/       the WebSocket server: sessions (state machine, reader,
//	          writer, sends), the pusher, its Config and metrics; it gets
//	          what the root owns through ws.Deps (small interfaces)
//	ephemeral/  typing and presence: the ephemeral NOTIFY channel (heard on
//	          the hub's connection), presence rows, heartbeats, grace,
//	          delivery to local sessions; never the log or the inbox
//	internal/apierr     the one client-facing error type and its mapping
//	internal/input      JSON decoding, text checks, msg_ids
//	internal/ratelimit  the per-user token buckets
//	internal/rows       columns and scanners of messages and records
//	internal/servers    the placement: the server of a user's and of a
//	                    conversation's statements
//
// The pieces shared by HTTP and WebSocket: hub.Hub (wake-ups),
// inbox.Reader.Sync and tooLongAnswer (entries after a cursor, or the
// too-long answer), sender (a send with its ack wait), authenticator, the
// rate limits and the error type (apierr).
//
// # Waking waiters
//
// Every gateway process holds one dedicated LISTEN connection (not from the
// pool; see package hub). A waiter (a held long-poll, a send waiting for
// its ack, a WebSocket session) subscribes before it reads, re-reads
// PostgreSQL after every wake-up (a notification is a hint, never data),
// and is woken by the hub after the LISTEN connection comes back, since
// notifications may have been lost meanwhile.
package gateway
