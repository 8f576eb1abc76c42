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
//
// Its own files:
//
//	config.go     Config and its defaults
//	gateway.go    New (the wiring), Handler, Listen, Run/Serve, Drain
//	routes.go     the route table (kept equal to openapi.yaml by a test),
//	              authentication, rate limiting and error mapping per route
//	sync.go       GET /v1/sync (304s from the head cache, long-polls), the
//	              too-long answer and its ws.Rebaser
//	records.go    the conversation list (records) and GET /v1/conversations
//	send.go       the send path (check, append, ack wait), shared with the
//	              WebSocket as its ws.Sender
//	messages.go   POST .../messages (sends)
//	history.go    GET .../messages: before, after, changed_after
//	large.go      the large list in sync answers: its ETag part, the
//	              long-poll's view of it (docs/large-conversations.md)
//	members.go    create, add/remove members (one or in bulk), record and
//	              read changes, the appender
//	auth.go       the token cache, the authenticator (also the
//	              WebSocket's ws.Authenticator: every token goes through
//	              one verifier, internal/auth), the dev token
//	identity.go   the verifier of Config (HS256 secret, the identity
//	              provider's JWKS) and its metrics
//	errors.go     writeError, the error shape of every HTTP answer
//	rawerrors.go  the error shape for what net/http answers by itself
//	decode.go     request body, query and path decoding
//	settings.go   GET and PATCH /v1/settings (hide_presence announces)
//	presence.go   GET /v1/presence
//	metrics.go    Prometheus metrics and the instrumenting middleware
//	health.go     /healthz, /readyz, /metrics, /openapi.yaml
//	ws.go         NewWebSocket (a ws.Server over the gateway's pieces) and
//	              GET /v1/ws
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
