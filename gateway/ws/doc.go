// Package ws is the gateway's WebSocket server, GET /v1/ws (docs/protocol.md):
// the handshake and admission, one session per connection, and the pusher
// that reads the entries of many sessions per query. It knows the gateway
// only through Deps: the inbox reader and the hub (packages below it) and
// small interfaces for what the gateway's root owns (Authenticator,
// Sender, Rebaser); it never refers to the gateway itself.
//
// # Sessions and the pusher
//
// A session's state is one field with named transitions (state.go); its
// reader takes frames in, its writer goroutine takes them out, and the
// pusher, not the session, reads entries: a session asks for a read and
// takes its result, and the pusher edits no session field. Read-mode
// conversations have an index of their own (large.go) whose frames leave
// through lanes spread over the pacing interval.
//
// A session's context is derived from the server's when the connection is
// admitted and cancelled when its reader ends; its hello's read and its
// sends run on it.
package ws
