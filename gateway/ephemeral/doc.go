// Package ephemeral is the gateway's typing and presence, and the delivery
// of read receipts: what members tell each other that is never written to
// the log or to the inbox, or (receipts) that is no inbox entry of the
// others (docs/websocket.md, "Typing and presence"; docs/decisions.md).
//
// The gateway processes share it through PostgreSQL, which every one of
// them already uses: a NOTIFY channel of its own (Config.Channel, heard on
// the hub's LISTEN connection, payloads encoded by package projection) for
// the live frames, and three small tables for presence (migrations
// 00007_presence.sql): the live gateways (a heartbeat), the users each
// holds WebSocket sessions of, and when each user was last seen.
//
// A Service keeps this process's side: the local sessions by user (Join),
// the typing rate limits (Typing), the session counts and grace timers that
// decide when this gateway's row of a user is written or deleted, the
// heartbeat and the reaping of dead gateways (Run), and the delivery of
// the channel's notifications to the local sessions of the users allowed
// to see them: membership and shared conversations are read from
// PostgreSQL at delivery, so a removed member sees nothing more.
//
// It must not import the WebSocket server (gateway/ws reaches it through
// an interface of ws.Deps), the projector or the gateway's root.
//
//	service.go   Service, Run, the local sessions (Join) and the dispatch
//	typing.go    typing frames: rate limits, the member check, delivery
//	presence.go  presence: transitions, grace, delivery
//	heartbeat.go the gateways' heartbeats and the reaping of dead ones
//	receipts.go  read receipts (the projector's notifications) to connected members
//	lookup.go    the presence a user may see (GET /v1/presence), settings
//	config.go    Config and its defaults
//	metrics.go   the metrics
package ephemeral
