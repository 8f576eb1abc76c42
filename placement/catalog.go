package placement

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/migrations"
)

// Channel is the NOTIFY channel a change of the placement is announced on
// (the payload is the new version).
const Channel = "inboxd_placement"

// ErrNotEmpty is returned by AddServer for a database that already holds
// projections or belongs to a deployment.
var ErrNotEmpty = errors.New("placement: the database is not an empty inboxd database")

var serverName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,63}$`)

const (
	sqlClaimCatalog = `INSERT INTO shard_identity (server) VALUES (1) ON CONFLICT (one) DO NOTHING`
	sqlIdentity     = `SELECT server FROM shard_identity`
	sqlHoldsState   = `SELECT EXISTS (SELECT 1 FROM users) OR EXISTS (SELECT 1 FROM conversations) OR EXISTS (SELECT 1 FROM consumer_offsets)`
	sqlClaimServer  = `INSERT INTO shard_identity (server) VALUES ($1)`
	sqlNextServer   = `SELECT coalesce(max(id), 1) + 1 FROM shard_servers`
	sqlAddServer    = `INSERT INTO shard_servers (id, name, dsn) VALUES ($1, $2, $3) RETURNING added_at`
	sqlBumpVersion  = `UPDATE placement_version SET version = version + 1 RETURNING version`
	sqlAnnounce     = `SELECT pg_notify('` + Channel + `', $1::text)`
	sqlLockCatalog  = `LOCK TABLE shard_servers, placement IN EXCLUSIVE MODE`
)

// AddServer registers the PostgreSQL database dsn as a new server of the
// deployment whose catalog is reached through catalog: it connects to it,
// applies the migrations there, checks that it is neither the catalog nor
// another deployment's server nor a database holding projections, marks
// it as the new server and adds it to the catalog. The server holds no
// partition until one is moved to it. name defaults to server-<id>.
func AddServer(ctx context.Context, catalog *pgxpool.Pool, name, dsn string) (Server, error) {
	if dsn == "" {
		return Server{}, errors.New("placement: a server needs a DSN")
	}
	if name != "" && !serverName.MatchString(name) {
		return Server{}, fmt.Errorf("placement: server name %q: letters, digits, '.', '_' or '-', at most 64", name)
	}
	if err := claimCatalog(ctx, catalog); err != nil {
		return Server{}, err
	}
	target, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return Server{}, fmt.Errorf("placement: connect to the new server: %w", err)
	}
	defer target.Close()
	if err := migrations.Up(ctx, target); err != nil {
		return Server{}, fmt.Errorf("placement: migrate the new server: %w", err)
	}
	var s Server
	err = pgx.BeginFunc(ctx, catalog, func(ctl pgx.Tx) error {
		if _, err := ctl.Exec(ctx, sqlLockCatalog); err != nil {
			return err
		}
		if err := ctl.QueryRow(ctx, sqlNextServer).Scan(&s.ID); err != nil {
			return err
		}
		s.Name, s.DSN = name, dsn
		if s.Name == "" {
			s.Name = fmt.Sprintf("server-%d", s.ID)
		}
		// The new server's mark commits first: if the catalog's insert
		// then fails, the mark names an id nobody has, and a second
		// attempt refuses the database; say so instead of guessing.
		err := pgx.BeginFunc(ctx, target, func(tt pgx.Tx) error {
			var id int32
			switch err := tt.QueryRow(ctx, sqlIdentity).Scan(&id); {
			case err == nil:
				return fmt.Errorf("%w: it is already server %d of a deployment", ErrNotEmpty, id)
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
			var holds bool
			if err := tt.QueryRow(ctx, sqlHoldsState).Scan(&holds); err != nil {
				return err
			}
			if holds {
				return fmt.Errorf("%w: it holds projections or consumer offsets", ErrNotEmpty)
			}
			if _, err := tt.Exec(ctx, sqlClaimServer, s.ID); err != nil {
				return err
			}
			// One epoch for the deployment: a user's cursor names the
			// catalog's epoch wherever the user's state is, so it stays
			// valid when a move takes the user to this server.
			var epoch int64
			if err := ctl.QueryRow(ctx, `SELECT epoch FROM meta`).Scan(&epoch); err != nil {
				return err
			}
			_, err := tt.Exec(ctx, `UPDATE meta SET epoch = $1`, epoch)
			return err
		})
		if err != nil {
			return err
		}
		if err := ctl.QueryRow(ctx, sqlAddServer, s.ID, s.Name, s.DSN).Scan(&s.AddedAt); err != nil {
			return fmt.Errorf("the new server is marked as server %d but the catalog did not take it (clear its shard_identity to retry): %w", s.ID, err)
		}
		return bump(ctx, ctl)
	})
	if err != nil {
		return Server{}, fmt.Errorf("placement: add the server: %w", err)
	}
	return s, nil
}

// claimCatalog marks the catalog's database as server 1, and refuses a
// catalog URL that names another server of a deployment.
func claimCatalog(ctx context.Context, catalog *pgxpool.Pool) error {
	if _, err := catalog.Exec(ctx, sqlClaimCatalog); err != nil {
		return fmt.Errorf("placement: mark the catalog: %w", err)
	}
	var id int32
	if err := catalog.QueryRow(ctx, sqlIdentity).Scan(&id); err != nil {
		return fmt.Errorf("placement: read the catalog's mark: %w", err)
	}
	if id != Catalog {
		return fmt.Errorf("placement: the database URL names server %d, not the catalog (server 1)", id)
	}
	return nil
}

// bump advances the placement's version and announces it, in tx.
func bump(ctx context.Context, tx pgx.Tx) error {
	var v int64
	if err := tx.QueryRow(ctx, sqlBumpVersion).Scan(&v); err != nil {
		return fmt.Errorf("bump the placement version: %w", err)
	}
	if _, err := tx.Exec(ctx, sqlAnnounce, fmt.Sprint(v)); err != nil {
		return fmt.Errorf("announce the placement: %w", err)
	}
	return nil
}

// ErrHoldsState is returned by Assign once any server holds projections:
// from then on a partition changes server only by a move, which copies
// its state.
var ErrHoldsState = errors.New("placement: the deployment holds projections; partitions move only with their state")

const sqlAssign = `INSERT INTO placement ("partition", server) SELECT p, $2 FROM unnest($1::int[]) AS p
ON CONFLICT ("partition") DO UPDATE SET server = excluded.server, state = 'serving', target = NULL, updated_at = now()`

// Assign places partitions on server while the deployment is new: before
// any server holds projections or consumer offsets (the initial
// placement of a sharded deployment, `inboxd shards assign`). It refuses
// with ErrHoldsState afterwards.
func Assign(ctx context.Context, catalog *pgxpool.Pool, server int32, partitions []int32) error {
	if len(partitions) == 0 {
		return errors.New("placement: no partitions to assign")
	}
	for _, p := range partitions {
		if p < 0 {
			return fmt.Errorf("placement: partition %d", p)
		}
	}
	if err := claimCatalog(ctx, catalog); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, catalog, func(ctl pgx.Tx) error {
		if _, err := ctl.Exec(ctx, sqlLockCatalog); err != nil {
			return err
		}
		rows, _ := ctl.Query(ctx, sqlLoadServers)
		servers, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Server, error) {
			var s Server
			return s, r.Scan(&s.ID, &s.Name, &s.DSN, &s.AddedAt)
		})
		if err != nil {
			return fmt.Errorf("servers: %w", err)
		}
		known := false
		for _, s := range servers {
			known = known || s.ID == server
			holds, err := holdsState(ctx, ctl, s)
			if err != nil {
				return fmt.Errorf("server %d: %w", s.ID, err)
			}
			if holds {
				return fmt.Errorf("%w (server %d)", ErrHoldsState, s.ID)
			}
		}
		if !known {
			return fmt.Errorf("placement: no server %d (add it first)", server)
		}
		if _, err := ctl.Exec(ctx, sqlAssign, partitions, server); err != nil {
			return err
		}
		return bump(ctx, ctl)
	})
	if err != nil {
		return fmt.Errorf("placement: assign: %w", err)
	}
	return nil
}

// holdsState says whether server s holds projections or offsets; the
// catalog (server 1) is read in its own transaction ctl.
func holdsState(ctx context.Context, ctl pgx.Tx, s Server) (bool, error) {
	var holds bool
	if s.ID == Catalog {
		return holds, ctl.QueryRow(ctx, sqlHoldsState).Scan(&holds)
	}
	conn, err := pgx.Connect(ctx, s.DSN)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return holds, conn.QueryRow(ctx, sqlHoldsState).Scan(&holds)
}

// Fence raises the placement fence of the server of pool to version: the
// stages' batches of an older placement already running finish first (the
// raise waits for their shared lock), and every later one is refused.
func Fence(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	if _, err := pool.Exec(ctx, `UPDATE placement_fence SET version = greatest(version, $1)`, version); err != nil {
		return fmt.Errorf("placement: raise the fence to %d: %w", version, err)
	}
	return nil
}
