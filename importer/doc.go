// Package importer brings the history of another chat system into inboxd
// through the log: it reads an NDJSON file of conversations, members and
// messages (docs/import.md), checks all of it before writing anything, and
// appends the events they are to the topic with the producer package, so
// that the fanout projects them like any write, a replay rebuilds them and
// analytics consumers see them.
//
// It owns the file format (format.go), the rules a file must follow
// (check.go), the deterministic ids that make a second run a no-op and the
// mapping of external conversation ids to inboxd ids (ids.go), the
// checkpoint a killed run resumes from (checkpoint.go) and the run itself
// (importer.go: the passes; append.go: the events appended in file order,
// checkpointed once the log acknowledged them). It must not write projections: everything it changes in
// them goes through the log. Its only tables are its own (migrations
// 00011_import.sql): the id mapping and the checkpoints.
package importer
