// Package projection is the contract between the write side (the projector,
// run by fanout and replay) and the read side (the gateway) of the stored
// projections: the NOTIFY channel and the codec of its payloads, the kinds
// of inbox entries and the reasons of rejections as stored, and the
// advisory-lock keys the writers share. The topic name lives with the event
// schema, in package events.
//
// It depends on the standard library only, and must stay that way: the
// gateway imports it, and must not link the projection engine (package
// projector) to read what that engine writes.
//
// # Notifications
//
// Every projected batch ends with pg_notify on DefaultChannel (a writer may
// be configured with another), delivered if and only if the batch commits.
// A payload is a space-separated list of tokens, each payload under
// PostgreSQL's limit of 8000 bytes (a batch sends as many as it needs):
//
//	h<user>:<head>                  the user's inbox head moved to head
//	i<user>:<first>:<conv>.<seq>,…  the user's new entries first, first+1, …
//	                                are the messages (conv, seq), in order;
//	                                small batches only, users whose new entries
//	                                are all messages
//	m<event_id>:<seq>               a message.sent was projected as seq
//	d<event_id>                     a message.sent whose msg_id was taken
//	r<msg_id>                       a message.sent (or a change: its change_id)
//	                                was rejected
//	u<conv>.<seq>:<version>         the message changed; its version is now version
//	c<conv>.<user>:<seq>            user's read position in conv moved to seq
//	L<conv>:<last_seq>:<changes>    a read-mode conversation moved (its head and
//	                                change count; docs/large-conversations.md)
//	M<conv>:<user>:<1|0>            user joined (1) or left (0) a read-mode
//	                                conversation
//	S<conv>:<from_seq>:<1|0>        conv is in read (1) or write (0) fan-out
//	                                from from_seq
//	e<epoch>                        a replay swapped in projections of a new epoch
//
// Readers skip tokens they do not know, and tokens they cannot parse, so
// that readers and writers can be upgraded in either order: a gateway older
// than its fanout misses only the fast paths the new tokens carry. The
// format is therefore append-only: a new meaning takes a new letter, and an
// existing token never changes shape.
package projection
