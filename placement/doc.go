// Package placement owns the map from Kafka partitions to PostgreSQL
// servers: the state of a conversation lives on the server of its
// partition of the event topic, a user's on the server of its partition of
// the user-keyed topic, and both topics have the same partition count, so
// one row per partition number places both (docs/scaling.md, "Placement").
//
// It computes the partition of a conversation or a user the way Kafka's
// default partitioner does (the producer's), reads and watches the catalog
// (the tables shard_servers and placement on server 1, the database
// DATABASE_URL names) and hands out a connection pool per server. It
// moves a partition between servers (move.go: pause, settle in, copy,
// settle out, switch, clean up, each step resumable; the settle-out's
// application of deliveries is handed in, package fanout's), and
// partstate.go is the one place outside the projector that knows which
// tables hold a partition's state: a table added to the projections must
// be named there, or a move leaves it behind.
//
// A deployment that never added a server is server 1 holding every
// partition: the catalog has one server and no placement rows, and every
// lookup answers server 1 without a query.
package placement
