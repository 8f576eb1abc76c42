package placement

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
)

// Catalog is server 1, whose copy of the placement tables counts.
const Catalog int32 = 1

// State is what a partition's placement is doing.
type State string

const (
	// Serving: the partition's state is on its server and served from it.
	Serving State = "serving"
	// Moving: a move to the target server is under way; the state is
	// still served from the source until the switch.
	Moving State = "moving"
)

// Server is a PostgreSQL server of the deployment.
type Server struct {
	ID   int32
	Name string
	// DSN reaches the server; empty for server 1, the catalog's own
	// database (whatever URL the process was given).
	DSN     string
	AddedAt time.Time
}

// Assignment is one partition's placement.
type Assignment struct {
	Partition int32
	Server    int32
	State     State
	Target    int32 // the server a move goes to; 0 unless Moving
	UpdatedAt time.Time
}

// Map is one version of the placement.
type Map struct {
	Version int64
	Servers []Server // by id
	rows    map[int32]Assignment
}

// Single is the map of a deployment on server 1 alone, which needs no
// query: a catalog with one server and no placement rows.
func Single() *Map {
	return &Map{Version: 1, Servers: []Server{{ID: Catalog, Name: "server-1"}}}
}

// Server is the server that holds partition p.
func (m *Map) Server(p int32) int32 {
	if a, ok := m.rows[p]; ok {
		return a.Server
	}
	return Catalog
}

// Serves says whether server serves partition p: p is on it and not
// moving. A moving partition is served nowhere: its conversations are not
// projected and its users are remote to every server, so that their
// entries wait as deliveries until the move ends.
func (m *Map) Serves(p, server int32) bool {
	a := m.Assignment(p)
	return a.Server == server && a.State == Serving
}

// Assignment is partition p's placement; a partition without a row is
// serving on server 1.
func (m *Map) Assignment(p int32) Assignment {
	if a, ok := m.rows[p]; ok {
		return a
	}
	return Assignment{Partition: p, Server: Catalog, State: Serving}
}

// ServerByID is the server with id, if it is in the map.
func (m *Map) ServerByID(id int32) (Server, bool) {
	i, ok := slices.BinarySearchFunc(m.Servers, id, func(s Server, id int32) int { return int(s.ID - id) })
	if !ok {
		return Server{}, false
	}
	return m.Servers[i], true
}

// Partitions lists the partitions among n that server holds.
func (m *Map) Partitions(server, n int32) []int32 {
	var ps []int32
	for p := range n {
		if m.Server(p) == server {
			ps = append(ps, p)
		}
	}
	return ps
}

// Moving is the partitions of this version that a move pauses (served
// nowhere until its switch or abort), in partition order.
func (m *Map) Moving() []Assignment {
	var out []Assignment
	for _, a := range m.rows {
		if a.State == Moving {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// Sharded says whether any partition is on a server other than 1, or on
// its way to one: whether state crosses servers at all.
func (m *Map) Sharded() bool {
	for _, a := range m.rows {
		if a.Server != Catalog || a.State == Moving {
			return true
		}
	}
	return false
}

const (
	sqlLoadVersion = `SELECT version FROM placement_version`
	sqlLoadServers = `SELECT id, name, coalesce(dsn, ''), added_at FROM shard_servers ORDER BY id`
	sqlLoadRows    = `SELECT "partition", server, state, coalesce(target, 0), updated_at FROM placement ORDER BY "partition"`
)

// Querier is what Load reads through: a pool, a connection.
type Querier interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Load reads the placement from the catalog, as one snapshot.
func Load(ctx context.Context, q Querier) (*Map, error) {
	m := &Map{rows: map[int32]Assignment{}}
	err := pgx.BeginTxFunc(ctx, q, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, sqlLoadVersion).Scan(&m.Version); err != nil {
			return fmt.Errorf("version: %w", err)
		}
		rows, _ := tx.Query(ctx, sqlLoadServers)
		servers, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Server, error) {
			var s Server
			return s, r.Scan(&s.ID, &s.Name, &s.DSN, &s.AddedAt)
		})
		if err != nil {
			return fmt.Errorf("servers: %w", err)
		}
		m.Servers = servers
		rows, _ = tx.Query(ctx, sqlLoadRows)
		as, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Assignment, error) {
			var a Assignment
			return a, r.Scan(&a.Partition, &a.Server, &a.State, &a.Target, &a.UpdatedAt)
		})
		if err != nil {
			return fmt.Errorf("partitions: %w", err)
		}
		for _, a := range as {
			m.rows[a.Partition] = a
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load the placement: %w", err)
	}
	return m, nil
}

// NewMap is a map of the given servers and assignments (a partition
// without one is on server 1): for tools and tests that place partitions
// without a catalog.
func NewMap(version int64, servers []Server, assignments ...Assignment) *Map {
	m := &Map{Version: version, Servers: slices.Clone(servers), rows: map[int32]Assignment{}}
	slices.SortFunc(m.Servers, func(a, b Server) int { return int(a.ID - b.ID) })
	for _, a := range assignments {
		if a.State == "" {
			a.State = Serving
		}
		m.rows[a.Partition] = a
	}
	return m
}

// Users places users for the projector of one server: the partition of a
// user is OfUser among Partitions, and it is local when the map puts that
// partition on Server (package projector's UserPlacement).
type Users struct {
	Map        *Map
	Server     int32
	Partitions int32
}

// Place returns user's partition and whether u.Server serves it (a user
// of a moving partition is remote everywhere).
func (u Users) Place(user int64) (int32, bool) {
	p := OfUser(user, u.Partitions)
	return p, u.Map.Serves(p, u.Server)
}
