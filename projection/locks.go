package projection

// Advisory lock keys (pg_advisory_lock and friends) of the processes that
// write the projections. Fanout holds LockFanout shared while it runs;
// replay takes it exclusively, so a replay cannot run beside a live fanout
// and a fanout started during a replay waits for it. LockRetention keeps one
// pruning run at a time. LockRelay keeps one relay of a server's outbox
// running at a time (for efficiency only: two relays produce copies the
// user stage drops). The values spell "inboxd" and a number, so that
// they are recognisable in pg_locks and unlikely to collide with another
// application's keys in the same database.
const (
	LockFanout    int64 = 0x696e626f78640001 // "inboxd" 1
	LockRetention int64 = 0x696e626f78640002 // "inboxd" 2
	LockRelay     int64 = 0x696e626f78640003 // "inboxd" 3
)
