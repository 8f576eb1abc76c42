// Package servers is the placement as the gateway reads it: a pool per
// PostgreSQL server and the server of a user's state and of a
// conversation's (docs/decisions.md, "Placement of state on several
// PostgreSQL servers"). One server is a single-server deployment: every
// statement goes to its one pool, as it always has. The gateway's root and
// its write path share it.
package servers

import "github.com/jackc/pgx/v5/pgxpool"

// Servers routes statements. Catalog is server 1 (Pools[0]): the global
// state (the conversation id sequence, API keys, the placement itself).
type Servers struct {
	Pools  []*pgxpool.Pool
	OfUser func(user int64) int // an index in Pools
	OfConv func(conv int64) int
}

// One is the placement of a single-server deployment.
func One(pool *pgxpool.Pool) *Servers {
	zero := func(int64) int { return 0 }
	return &Servers{Pools: []*pgxpool.Pool{pool}, OfUser: zero, OfConv: zero}
}

// Sharded reports whether there are several servers.
func (s *Servers) Sharded() bool { return len(s.Pools) > 1 }

// Catalog is server 1's pool.
func (s *Servers) Catalog() *pgxpool.Pool { return s.Pools[0] }

// User is the pool of user's server; Conv of conv's.
func (s *Servers) User(user int64) *pgxpool.Pool { return s.Pools[s.OfUser(user)] }
func (s *Servers) Conv(conv int64) *pgxpool.Pool { return s.Pools[s.OfConv(conv)] }
