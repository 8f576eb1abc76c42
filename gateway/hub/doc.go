// Package hub is the gateway's notification hub: one dedicated LISTEN
// connection per gateway process and PostgreSQL server (Hub.Run, and
// Hub.RunServers on a sharded placement), the waiters subscribed to it
// (Subscription), and the head caches the notifications keep current
// (HeadCache, one per server: each holds its users' heads at its epoch
// and is valid while its connection is up; servers_test.go runs two). It reads the notifications through package projection, the
// contract with the projector; it runs no query of its own and knows
// nothing of HTTP or WebSocket.
//
// # Waking waiters
//
// A notification names the users whose inbox heads moved in one committed
// projector batch; the hub wakes every waiter of those users (held
// long-polls, sends waiting for their ack, WebSocket sessions). A waiter
// always re-reads PostgreSQL after a wake-up: a notification is a hint,
// never data. Waiters subscribe before they read, so a commit between the
// read and the subscription cannot be missed. When the LISTEN connection
// drops, notifications may be lost; after reconnecting the hub wakes every
// waiter so that each re-reads.
//
// The wake-ups of one notification are spread over Config.WakeJitter so
// that a commit that touches many users does not turn into a thundering
// herd of simultaneous queries.
//
//	hub.go    Hub, Subscription, the LISTEN loop and the dispatch
//	heads.go  HeadCache, kept current by the notifications
//	large.go  read-mode conversations: waiters by conversation, the
//	          listeners of the L/M/S tokens
package hub
