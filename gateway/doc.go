// Package gateway serves the client protocol of PROTOCOL.md over HTTP: sync
// and long-poll of a user's inbox, the conversation list, history, sends and
// the membership/record changes, plus health, readiness, metrics and the
// OpenAPI document. It reads the PostgreSQL projections and appends events
// through producer; it must not write projections (that is projector's) nor
// consume the log. It reads what the projector writes (the notifications,
// the stored kinds and reasons) through package projection, the contract
// between the two sides, and must not import projector, the write engine,
// nor web, the demo page (`inboxd dev` mounts it through Config.Pages).
// The wire types, error codes, frame types and close codes are package
// protocol's; the gateway declares none of its own.
//
// # Layout
//
//	config.go     Config and its defaults
//	gateway.go    New, Handler, Listen, Run/Serve, Drain (the lifecycle)
//	routes.go     the route table (kept equal to openapi.yaml by a test),
//	              authentication, rate limiting and error mapping per route
//	hub.go        the notification hub: one LISTEN connection, waiters by user
//	heads.go      the head cache, kept current by the notifications
//	inbox.go      the inbox read shared by sync and push: the key read,
//	              then the messages the cache lacks and the records
//	entries.go    the wire form of entries, written by hand
//	pgraw.go      decoding of raw integer columns and integer arrays
//	msgcache.go   the cache of messages' wire form, by conversation
//	sync.go       the sync and too-long queries and GET /v1/sync
//	records.go    the conversation list (records) and GET /v1/conversations
//	messages.go   sends (with the ack wait) and history
//	members.go    create, add/remove members, record and read changes
//	objects.go    how the protocol's objects are read from the projections
//	auth.go       JWT verification and the dev token endpoint
//	errors.go     the one client-facing error type and its mapping
//	rawerrors.go  the error shape for what net/http answers by itself
//	decode.go     request body and query decoding
//	text.go       text PostgreSQL cannot store, refused at every entry
//	ratelimit.go  per-user token buckets and the X-RateLimit-* headers
//	metrics.go    Prometheus metrics and the instrumenting middleware
//	health.go     /healthz, /readyz, /metrics, /openapi.yaml
//
// The WebSocket endpoint, built on the same pieces:
//
//	ws.go         WebSocket: NewWebSocket, the handshake, admission, Run
//	ws_config.go  WSConfig and its defaults
//	ws_session.go a session: its lifecycle, timers, hub wake-ups and queues
//	ws_state.go   the session's state (one field) and its transitions
//	ws_reader.go  the session's reader: frames in, decoding, the hello
//	ws_send.go    the session's sends
//	ws_fetch.go   the session's side of the pusher: a read asked for, begun,
//	              and its result taken (the pusher edits no session field)
//	ws_writer.go  wsWriter, the session's queued frames, and its writer goroutine:
//	              frames out, close, stalls
//	ws_stall.go   stallConn, the net.Conn that turns a blocked write into 4008
//	ws_frames.go  how frames are encoded
//	ws_metrics.go the WebSocket metrics
//	push.go       the pusher: the entries of many sessions per query
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
