package gateway

import "github.com/jackc/pgx/v5/pgxpool"

// servers is the placement as the gateway's reads see it: a pool per
// PostgreSQL server and the server (an index in pools) of a user's state
// and of a conversation's (docs/decisions.md, "Placement of state on
// several PostgreSQL servers"). One server is today's deployment: every
// read goes to pools[0] as it always has.
type servers struct {
	pools  []*pgxpool.Pool
	ofUser func(user int64) int
	ofConv func(conv int64) int
}

// oneServer is the placement of a single-server deployment.
func oneServer(pool *pgxpool.Pool) *servers {
	zero := func(int64) int { return 0 }
	return &servers{pools: []*pgxpool.Pool{pool}, ofUser: zero, ofConv: zero}
}

// sharded reports whether there are several servers.
func (s *servers) sharded() bool { return len(s.pools) > 1 }

// user is the pool of user's server; conv of conv's.
func (s *servers) user(user int64) *pgxpool.Pool { return s.pools[s.ofUser(user)] }
func (s *servers) conv(conv int64) *pgxpool.Pool { return s.pools[s.ofConv(conv)] }
