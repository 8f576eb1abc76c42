// Package protocol is the wire contract of inboxd's client API
// (docs/protocol.md, docs/protocol.md, docs/websocket.md), declared once for the
// gateway that writes it, the Go SDK (package client) that reads it, and
// every test that checks it.
//
// It owns:
//   - the objects: Message, Record, Entry and the entry kinds;
//   - the HTTP bodies: sync pages and too-long answers, the conversation
//     list, history, the request bodies of the write endpoints and their
//     answers, the error body and its codes;
//   - the WebSocket frames, their type names and the close codes;
//   - the wire encoding: Marshal (JSON without HTML escaping, as every
//     answer is written) and the hand-written appenders of the hot paths
//     (AppendEntry, AppendSyncPage, AppendEntriesFrame), which produce
//     exactly what encoding/json writes for the corresponding types.
//
// Field names, omitempty and nullability are the contract: a change here is
// a change of the protocol. Fields may be added (clients ignore fields they
// do not know, and every decoding type here is tolerant), none may change
// meaning. The types that exist only for decoding (SyncAnswer, ServerFrame,
// ClientFrame) are unions of the frames or bodies one message may be; the
// sending side encodes the specific types.
//
// It must not do I/O, hold state, log, or know anything of the server: no
// SQL, no caches, no HTTP handlers, no imports of other inboxd packages. The
// SDK imports it, so what is here ships to every client.
package protocol
