// Package inbox is the gateway's inbox reader, the read path of GET
// /v1/sync and of the WebSocket pushes: entries after a cursor for one
// user or for many in one statement (Read), the too-long rules of a
// client's sync (Sync), pages built from the entries a notification
// announced (Resolve), and the entries' wire form (Entry, AppendEntries).
//
// Inbox entries are read from PostgreSQL as bare keys (inbox_seq,
// conversation, kind, message seq) in one statement, decoded from the raw
// binary arrays without Scan's reflection, and the messages they point at
// come from the message cache: a message never changes once committed
// (docs/protocol.md has no edits), so its wire form is rendered once and reused
// by every page and frame that carries it, for every member. Only the
// messages the cache lacks, and the records of record entries (current
// state, rare), take a second statement.
//
// On several PostgreSQL servers (NewSharded, Servers) the key read runs on
// each user's server, the messages, reactions and the conversation side of
// records on the conversations' servers, and the totals and large lists on
// every server, summed; a message is cached under its own server's epoch.
// sharded_test.go reads the same log projected on one server and on two
// and finds every user's entries, records, totals and large list equal.
//
// It only reads; it knows nothing of HTTP or WebSocket.
//
//	read.go       Reader, Config, Servers, Read (the key read, the second
//	              statements, across servers)
//	sync.go       Query, Result, Sync (GET /v1/sync's rules)
//	counts.go     the totals remembered at a user's head and large list
//	announced.go  Announced, Resolve (pushes from the notifications' runs)
//	entries.go    Entry and its wire form, written by hand
//	blocked.go    Blocked, MaskBlocked: a blocked sender's messages emptied
//	pgraw.go      decoding of raw integer columns and integer arrays
//	msgcache.go   the cache of messages' wire form, by conversation
//	large.go      the reads of read-mode conversations for the WebSocket
//	              pushes: large lists, local members, a conversation's news
package inbox
