// Package ws is the gateway's WebSocket server, GET /v1/ws (docs/protocol.md):
// the handshake and admission, one session per connection, and the pusher
// that reads the entries of many sessions per query. It knows the gateway
// only through Deps: the inbox reader and the hub (packages below it) and
// small interfaces for what the gateway's root owns (Authenticator,
// Sender, Rebaser); it never refers to the gateway itself.
//
// # Layout
//
//	server.go   Server: New, the handshake, admission, Run, closeAll, Inspect
//	deps.go     Deps and the interfaces the gateway implements
//	config.go   Config and its defaults
//	session.go  a session: its lifecycle and context, timers, hub wake-ups,
//	            queues
//	state.go    the session's state (one field) and its transitions
//	reader.go   the session's reader: frames in, decoding, the hello
//	send.go     the session's sends
//	fetch.go    the session's side of the pusher: a read asked for, begun,
//	            and its result taken (the pusher edits no session field)
//	writer.go   sessionWriter, the session's queued frames, and its writer
//	            goroutine: frames out, close, stalls
//	stall.go    stallConn, the net.Conn that turns a blocked write into 4008
//	frames.go   how frames are encoded
//	metrics.go  the WebSocket metrics
//	push.go     the pusher: the entries of many sessions per query
//	large.go    the index of read-mode conversations and their messages
//	            and large frames (hello "large": true)
//
// A session's context is derived from the server's when the connection is
// admitted and cancelled when its reader ends; its hello's read and its
// sends run on it.
package ws
