// Package write is the gateway's write path: a send (Sender), a change of
// a message (Changer), the writes of conversations, memberships and
// records (Members), and the append of any event (Appender), shared by
// the HTTP routes, the WebSocket sessions and the server API.
//
// Each write checks, in one statement, what the projection would refuse
// (no conversation, not a member, a taken msg_id or change_id, a change
// the rules forbid), so that a refusal is answered at once and changes
// nothing; appends its event through the producer; and waits up to the
// ack wait for the projection's notification on the hub, subscribed
// before the check so that nothing is missed. The answer is built from
// what was sent and put in the message cache before the members' sessions
// are woken. A write never touches the projections itself: the projector
// applies the event at its log position and has the last word.
//
// The package knows nothing of HTTP or of the WebSocket: it takes its
// requests as plain structs and answers with results and *apierr.Error
// values, which each transport maps to its own shape.
package write
