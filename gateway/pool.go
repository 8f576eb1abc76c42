package gateway

import "runtime"

// MinDBConns is the floor of DBMaxConns.
const MinDBConns = 16

// DBMaxConns is the default size of a gateway's PostgreSQL pool:
// max(MinDBConns, the machine's cores), where pgx's own default is
// max(4, cores). Every send holds a connection for its check, a statement
// that writes the message's body key and waits for its commit to reach
// the disk: the time is the WAL flush, not CPU, so a pool sized by cores
// queues sends behind a few flushes (docs/decisions.md, "Measured reasons
// behind defaults"). More connections also let PostgreSQL flush many
// sends' commits in one write. Count them in max_connections: gateways x
// this, plus the fanouts' and notifiers' pools.
func DBMaxConns() int { return max(MinDBConns, runtime.NumCPU()) }
