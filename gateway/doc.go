// Package gateway serves the client protocol of PROTOCOL.md over HTTP: sync
// and long-poll of a user's inbox, the conversation list, history, sends and
// the membership/record changes, plus health, readiness, metrics and the
// OpenAPI document. It reads the PostgreSQL projections and appends events
// through producer; it must not write projections (that is projector's) nor
// consume the log. It reads what the projector writes (the notifications,
// the stored kinds and reasons) through package projection, the contract
// between the two sides, and must not import projector, the write engine,
// nor web, the demo page (`inboxd dev` mounts it through Config.Pages).
// consume the log. The wire types, error codes, frame types and close codes
// are package protocol's; the gateway declares none of its own.
//
// # Layout
//
//	config.go     Config and its defaults
//	gateway.go    New, Handler, Listen, Run/Serve, Drain (the lifecycle)
//	routes.go     the route table (kept equal to openapi.yaml by a test),
//	              authentication, rate limiting and error mapping per route
//	hub.go        the notification hub: one LISTEN connection, waiters by user
//	sync.go       the sync and too-long queries and GET /v1/sync
//	records.go    the conversation list (records) and GET /v1/conversations
//	messages.go   sends (with the ack wait) and history
//	members.go    create, add/remove members, record and read changes
//	objects.go    how the protocol's objects are read from the projections
//	auth.go       JWT verification and the dev token endpoint
//	errors.go     the one client-facing error type and its mapping
//	decode.go     request body and query decoding
//	ratelimit.go  per-user token buckets and the X-RateLimit-* headers
//	metrics.go    Prometheus metrics and the instrumenting middleware
//	health.go     /healthz, /readyz, /metrics, /openapi.yaml
//	ws*.go, push.go  the WebSocket endpoint, built on the same pieces
//
// The pieces shared by HTTP and WebSocket: hub.subscribeUser (wake-ups),
// Gateway.readSync and Gateway.tooLongAnswer (entries after a cursor, or the
// too-long answer), Gateway.send (a send with its ack wait), authenticate,
// the limiters and writeError.
//
// # Waking waiters
//
// Every gateway process holds one dedicated LISTEN connection (not from the
// pool). A notification names the users whose inbox heads moved in one
// committed projector batch; the hub wakes every waiter of those users
// (held long-polls, sends waiting for their ack and, later, WebSocket
// sessions). A waiter always re-reads PostgreSQL after a wake-up: a
// notification is a hint, never data. Waiters subscribe before they read, so
// a commit between the read and the subscription cannot be missed. When the
// LISTEN connection drops, notifications may be lost; after reconnecting the
// hub wakes every waiter so that each re-reads.
//
// The wake-ups of one notification are spread over Config.WakeJitter so that
// a commit that touches many users does not turn into a thundering herd of
// simultaneous queries.
package gateway
