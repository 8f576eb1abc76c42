package gateway

import "runtime"

// MinDBConns is the floor of DBMaxConns.
const MinDBConns = 16

// DBMaxConns is the default size of a gateway's PostgreSQL pool:
// max(MinDBConns, the machine's cores), where pgx's own default is
// max(4, cores). Every send holds a connection for its check, a statement
// that writes the message's body key and waits for its commit to reach
// the disk: the time is the WAL flush, not CPU, so a pool sized by cores
// queues sends behind a few flushes. Measured (inboxd-bench e2e at 1,000
// msg/s, 2 cores, the gateway's inboxd_gateway_send_stage_seconds): with
// 4 connections the check stage was the largest part of the send in every
// run (p50 27-232 ms in the three runs of bench all, 1.4 s in two more,
// where the load was then not sustained); with 16 it stayed at 8-21 ms
// and no run collapsed. More connections also let PostgreSQL flush many
// sends' commits in one write. Count them in max_connections: gateways x
// this, plus the fanouts' and notifiers' pools.
func DBMaxConns() int { return max(MinDBConns, runtime.NumCPU()) }
