package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Moving a partition between servers (docs/decisions.md, "Moving a
// partition"): pause, settle in, copy, settle out, switch. Every step can
// be repeated, so that a move interrupted at any point resumes (Move
// again) or, before its copy is recorded, rolls back (Abort).

// Phases of a move, as recorded in the catalog (placement.move_phase).
const (
	PhaseStarted = "started" // moving: paused, not copied yet
	PhaseCopied  = "copied"  // the target holds the partition's state
)

// MoveConfig is one move.
type MoveConfig struct {
	Partition int32
	Target    int32
	// Partitions is the event topic's partition count; Topic and
	// Deliveries are the two topics whose offsets move with the partition.
	Partitions        int32
	Topic, Deliveries string
	// DrainTimeout bounds each wait of a move for other processes: the
	// source's relay producing the partition's outbox, the target's user
	// stage applying the partition's deliveries to it, the target's relay
	// producing its deliveries to the partition. Default 2 minutes.
	DrainTimeout time.Duration
	// Settle applies on the target, under placement version, every
	// delivery to the partition waiting in the deliveries topic (from the
	// offset the target stores for it to the topic's end), as the target's
	// user stage would, and says how many it applied. Required: package
	// fanout's ApplyWaiting. The target's stages are fenced meanwhile.
	Settle func(ctx context.Context, target *pgxpool.Pool, version int64) (int, error)
	// GatewayExpiry is the gateways' presence expiry: after the switch the
	// old server keeps the partition until no live gateway reads an older
	// placement (a gateway restarts on each version; one killed counts
	// until its heartbeat is this old). Default 30s, the gateways'.
	GatewayExpiry time.Duration
	Logger        *slog.Logger
	// Stop, when set (tests), is asked after each phase is recorded whether
	// to stop there, as a crash would.
	Stop func(phase string) bool
}

// MoveResult says what a move did.
type MoveResult struct {
	From, To      int32
	Conversations int           // conversations moved
	Users         int           // users moved
	Rows          int64         // rows copied
	Paused        time.Duration // from the pause to the switch (this run of the move)
	Copy          time.Duration
	// Fenced is how long the target's own stages were held for the
	// settle-out (every partition of the target waits that long).
	Fenced time.Duration
	// Settled counts the deliveries to the partition applied by the move.
	Settled int
}

// ErrStopped is returned by Move when cfg.Stop stopped it.
var ErrStopped = errors.New("placement: move stopped")

const (
	sqlBeginMove = `UPDATE placement SET state = 'moving', target = $2, move_phase = 'started', updated_at = now()
WHERE "partition" = $1 AND state = 'serving'`
	sqlEnsureRow = `INSERT INTO placement ("partition", server) VALUES ($1, 1) ON CONFLICT DO NOTHING`
	sqlSetPhase  = `UPDATE placement SET move_phase = $2, updated_at = now() WHERE "partition" = $1 AND state = 'moving'`
	sqlSwitch    = `UPDATE placement SET server = target, state = 'serving', target = NULL, move_phase = NULL, updated_at = now()
WHERE "partition" = $1 AND state = 'moving'`
	sqlAbort = `UPDATE placement SET state = 'serving', target = NULL, move_phase = NULL, updated_at = now()
WHERE "partition" = $1 AND state = 'moving' AND move_phase <> 'copied'`
	sqlPhase = `SELECT coalesce(move_phase, '') FROM placement WHERE "partition" = $1`
)

// Move moves cfg.Partition to cfg.Target, or resumes a move of it to the
// same target that was interrupted. The partition's writes are paused
// from its start to its switch: fanouts serve one placement version and
// restart on the next, and a moving partition is served nowhere.
func Move(ctx context.Context, catalog *pgxpool.Pool, cfg MoveConfig) (MoveResult, error) {
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Partitions <= 0 || cfg.Partition < 0 || cfg.Partition >= cfg.Partitions {
		return MoveResult{}, fmt.Errorf("placement: partition %d of %d", cfg.Partition, cfg.Partitions)
	}
	if cfg.Settle == nil {
		return MoveResult{}, errors.New("placement: a move needs MoveConfig.Settle")
	}
	if cfg.GatewayExpiry == 0 {
		cfg.GatewayExpiry = 30 * time.Second
	}
	start := time.Now()
	m, err := Load(ctx, catalog)
	if err != nil {
		return MoveResult{}, err
	}
	a := m.Assignment(cfg.Partition)
	if _, ok := m.ServerByID(cfg.Target); !ok {
		return MoveResult{}, fmt.Errorf("placement: no server %d", cfg.Target)
	}
	switch {
	case a.State == Serving && a.Server == cfg.Target:
		// Done, or switched and interrupted before the source was
		// cleaned: what any other server still holds of the partition
		// goes.
		return MoveResult{From: a.Server, To: a.Server}, sweep(ctx, catalog, m, cfg)
	case a.State == Moving && a.Target != cfg.Target:
		return MoveResult{}, fmt.Errorf("placement: partition %d is moving to server %d; abort that move first", cfg.Partition, a.Target)
	case a.State == Serving:
		err := pgx.BeginFunc(ctx, catalog, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, sqlLockCatalog); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, sqlEnsureRow, cfg.Partition); err != nil {
				return err
			}
			if tag, err := tx.Exec(ctx, sqlBeginMove, cfg.Partition, cfg.Target); err != nil {
				return err
			} else if tag.RowsAffected() != 1 {
				return fmt.Errorf("partition %d changed meanwhile", cfg.Partition)
			}
			return bump(ctx, tx)
		})
		if err != nil {
			return MoveResult{}, fmt.Errorf("placement: begin the move: %w", err)
		}
		if m, err = Load(ctx, catalog); err != nil {
			return MoveResult{}, err
		}
		cfg.Logger.Info("move started: the partition is paused", "partition", cfg.Partition, "from", a.Server, "to", cfg.Target)
		if cfg.Stop != nil && cfg.Stop(PhaseStarted) {
			return MoveResult{}, ErrStopped
		}
	}
	res := MoveResult{From: a.Server, To: cfg.Target}
	pools, closePools, err := openServers(ctx, catalog, m, a.Server, cfg.Target)
	if err != nil {
		return res, err
	}
	defer closePools()
	src, dst := pools[a.Server], pools[cfg.Target]
	after := movedMap(m, cfg.Partition, cfg.Target)
	var phase string
	if err := catalog.QueryRow(ctx, sqlPhase, cfg.Partition).Scan(&phase); err != nil {
		return res, err
	}
	if phase != PhaseCopied {
		// The source is fenced at the moving version: batches that still
		// treat the partition as served there are waited out, later ones
		// refused. Then its relay must have produced the partition's
		// outbox, or the target's first deliveries could overtake it.
		if err := Fence(ctx, src, m.Version); err != nil {
			return res, err
		}
		if err := drainOutbox(ctx, src, `source_partition`, cfg.Partition, cfg.DrainTimeout); err != nil {
			return res, err
		}
		// Settle in: the target's users must have every entry the
		// partition's conversations sent them, before the target's
		// conversation stage writes the next ones in place.
		if err := settleIn(ctx, src, dst, m, cfg); err != nil {
			return res, err
		}
		t0 := time.Now()
		st, err := readPartition(ctx, src, cfg)
		if err != nil {
			return res, fmt.Errorf("placement: read partition %d on server %d: %w", cfg.Partition, a.Server, err)
		}
		if err := st.write(ctx, dst); err != nil {
			return res, fmt.Errorf("placement: copy partition %d to server %d: %w", cfg.Partition, cfg.Target, err)
		}
		res.Copy = time.Since(t0)
		res.Conversations, res.Users, res.Rows = len(st.convs), len(st.users), st.rows()
		if _, err := catalog.Exec(ctx, sqlSetPhase, cfg.Partition, PhaseCopied); err != nil {
			return res, err
		}
		cfg.Logger.Info("partition copied", "partition", cfg.Partition, "to", cfg.Target, "conversations", res.Conversations,
			"users", res.Users, "rows", res.Rows, "took", res.Copy)
		if cfg.Stop != nil && cfg.Stop(PhaseCopied) {
			return res, ErrStopped
		}
	}
	// Settle out: the partition's users must have every entry the
	// target's conversation stage sent them as deliveries before it
	// writes the next ones in place.
	t0 := time.Now()
	if res.Settled, err = settleOut(ctx, catalog, dst, cfg, cfg.Target, sqlSwitch); err != nil {
		return res, err
	}
	res.Fenced = time.Since(t0)
	res.Paused = time.Since(start)
	// The source keeps its copy past the switch: a gateway of an older
	// placement reads the partition there until it restarts on the new
	// one. A crash before the clean-up is repaired by running the move
	// again.
	var switched int64
	if err := catalog.QueryRow(ctx, sqlLoadVersion).Scan(&switched); err != nil {
		return res, err
	}
	if err := waitGateways(ctx, catalog, switched, cfg); err != nil {
		return res, err
	}
	if err := cleanSource(ctx, src, cfg, after, a.Server); err != nil {
		return res, fmt.Errorf("placement: remove partition %d from server %d (it moved; run the move again to finish): %w", cfg.Partition, a.Server, err)
	}
	cfg.Logger.Info("partition moved", "partition", cfg.Partition, "from", a.Server, "to", cfg.Target, "paused", res.Paused)
	return res, nil
}

// Abort rolls back a move of partition that has not recorded its copy:
// the partition serves on its server again (settled as a move's target
// is), and what a copy left on the target is removed. A copied move cannot be aborted (the source may
// already be cleaned): Move resumes it.
func Abort(ctx context.Context, catalog *pgxpool.Pool, cfg MoveConfig) error {
	m, err := Load(ctx, catalog)
	if err != nil {
		return err
	}
	a := m.Assignment(cfg.Partition)
	if a.State != Moving {
		return fmt.Errorf("placement: partition %d is not moving", cfg.Partition)
	}
	var phase string
	if err := catalog.QueryRow(ctx, sqlPhase, cfg.Partition).Scan(&phase); err != nil {
		return err
	}
	if phase == PhaseCopied {
		return fmt.Errorf("placement: partition %d is copied to server %d: resume the move, it cannot be aborted", cfg.Partition, a.Target)
	}
	pools, closePools, err := openServers(ctx, catalog, m, a.Server, a.Target)
	if err != nil {
		return err
	}
	defer closePools()
	// What an interrupted copy may have left: the target holds nothing of
	// the partition but the records it keeps for its own users and
	// conversations.
	st, err := readPartition(ctx, pools[a.Server], cfg)
	if err != nil {
		return err
	}
	if err := st.remove(ctx, pools[a.Target], m, a.Target); err != nil {
		return err
	}
	// The partition serves on its server again, whose conversation stage
	// then writes its users' entries in place: what it sent them as
	// deliveries while they moved is applied first, as a move's
	// settle-out does on its target.
	_, err = settleOut(ctx, catalog, pools[a.Server], cfg, a.Server, sqlAbort)
	return err
}

// settleOut ends a move on server (pool): it fences the server at the
// version the catalog's next change makes, which holds its stages (all
// its partitions) until they restart on that version; waits for its relay
// to produce what its conversation stage sent the partition's users;
// applies every delivery waiting for them (cfg.Settle); then, in one
// catalog transaction that the placement did not change meanwhile, runs
// end (the switch, or the abort) and bumps the version. It returns the
// deliveries applied.
func settleOut(ctx context.Context, catalog, pool *pgxpool.Pool, cfg MoveConfig, server int32, end string) (int, error) {
	var current int64
	if err := catalog.QueryRow(ctx, sqlLoadVersion).Scan(&current); err != nil {
		return 0, err
	}
	if err := Fence(ctx, pool, current+1); err != nil {
		return 0, err
	}
	if err := drainOutbox(ctx, pool, `destination`, cfg.Partition, cfg.DrainTimeout); err != nil {
		return 0, err
	}
	settled, err := cfg.Settle(ctx, pool, current+1)
	if err != nil {
		return 0, fmt.Errorf("placement: apply the deliveries to partition %d on server %d: %w", cfg.Partition, server, err)
	}
	err = pgx.BeginFunc(ctx, catalog, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLockCatalog); err != nil {
			return err
		}
		var now int64
		if err := tx.QueryRow(ctx, sqlLoadVersion).Scan(&now); err != nil {
			return err
		}
		if now != current {
			return fmt.Errorf("the placement changed during the settle (version %d, now %d): run the command again", current, now)
		}
		if tag, err := tx.Exec(ctx, end, cfg.Partition); err != nil {
			return err
		} else if tag.RowsAffected() != 1 {
			return fmt.Errorf("partition %d changed meanwhile", cfg.Partition)
		}
		return bump(ctx, tx)
	})
	if err != nil {
		return settled, fmt.Errorf("placement: end the move of partition %d: %w", cfg.Partition, err)
	}
	return settled, nil
}

// movedMap is m with partition p served on target.
func movedMap(m *Map, p, target int32) *Map {
	rows := make([]Assignment, 0, len(m.rows)+1)
	for _, a := range m.rows {
		if a.Partition != p {
			rows = append(rows, a)
		}
	}
	rows = append(rows, Assignment{Partition: p, Server: target, State: Serving})
	return NewMap(m.Version+1, m.Servers, rows...)
}

// openServers connects to the given servers (the catalog is server 1).
func openServers(ctx context.Context, catalog *pgxpool.Pool, m *Map, ids ...int32) (map[int32]*pgxpool.Pool, func(), error) {
	pools := map[int32]*pgxpool.Pool{}
	var opened []*pgxpool.Pool
	closeAll := func() {
		for _, p := range opened {
			p.Close()
		}
	}
	for _, id := range ids {
		if id == Catalog {
			pools[id] = catalog
			continue
		}
		s, ok := m.ServerByID(id)
		if !ok {
			closeAll()
			return nil, nil, fmt.Errorf("placement: no server %d", id)
		}
		p, err := pgxpool.New(ctx, s.DSN)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("placement: connect to server %d: %w", id, err)
		}
		opened = append(opened, p)
		pools[id] = p
	}
	return pools, closeAll, nil
}

// drainOutbox waits until the server's outbox holds no delivery whose
// column (source_partition or destination) is p.
func drainOutbox(ctx context.Context, pool *pgxpool.Pool, column string, p int32, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE `+column+` = $1`, p).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("placement: %d deliveries (%s %d) still in a server's outbox after %v: is its relay (inboxd fanout) running?", n, column, p, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// settleIn waits until dst has applied every delivery the partition's
// conversations emitted (on src, paused and drained) to the users of dst:
// per destination partition on dst, the marks' applied count of source p
// reaches the emitted count.
func settleIn(ctx context.Context, src, dst *pgxpool.Pool, m *Map, cfg MoveConfig) error {
	rows, _ := src.Query(ctx, `SELECT destination, emitted FROM delivery_sources WHERE source_partition = $1`, cfg.Partition)
	emitted := map[int32]int64{}
	var d int32
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&d, &n}, func() error {
		if m.Serves(d, cfg.Target) {
			emitted[d] = n
		}
		return nil
	}); err != nil {
		return fmt.Errorf("placement: deliveries emitted from partition %d: %w", cfg.Partition, err)
	}
	deadline := time.Now().Add(cfg.DrainTimeout)
	for {
		rows, _ := dst.Query(ctx, `SELECT destination, applied_count FROM delivery_marks WHERE source_partition = $1`, cfg.Partition)
		applied := map[int32]int64{}
		if _, err := pgx.ForEachRow(rows, []any{&d, &n}, func() error { applied[d] = n; return nil }); err != nil {
			return fmt.Errorf("placement: deliveries applied from partition %d: %w", cfg.Partition, err)
		}
		behind := 0
		for d, e := range emitted {
			if applied[d] < e {
				behind++
			}
		}
		if behind == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("placement: server %d has not applied the deliveries from partition %d to %d of its partitions after %v: is its user stage (inboxd fanout) running?",
				cfg.Target, cfg.Partition, behind, cfg.DrainTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// sweep removes the partition's state from every server but the one that
// serves it under m (the records they keep for their own users and
// conversations stay).
func sweep(ctx context.Context, catalog *pgxpool.Pool, m *Map, cfg MoveConfig) error {
	for _, srv := range m.Servers {
		if srv.ID == cfg.Target {
			continue
		}
		pools, closePools, err := openServers(ctx, catalog, m, srv.ID)
		if err != nil {
			return err
		}
		err = cleanSource(ctx, pools[srv.ID], cfg, m, srv.ID)
		closePools()
		if err != nil {
			return fmt.Errorf("placement: remove partition %d from server %d: %w", cfg.Partition, srv.ID, err)
		}
	}
	return nil
}

// sqlOldGateways are the live gateways that read a placement older than
// $1 ($2: the presence expiry in ms).
const sqlOldGateways = `SELECT count(*) FROM presence_gateways
WHERE placement_version < $1 AND heartbeat_at > now() - $2 * interval '1 millisecond'`

// waitGateways waits until no live gateway reads a placement older than
// version.
func waitGateways(ctx context.Context, catalog *pgxpool.Pool, version int64, cfg MoveConfig) error {
	deadline := time.Now().Add(cfg.GatewayExpiry + cfg.DrainTimeout)
	for {
		var n int
		if err := catalog.QueryRow(ctx, sqlOldGateways, version, cfg.GatewayExpiry.Milliseconds()).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("placement: partition %d moved, but %d gateways still read an older placement than %d: run the move again to remove it from its old server", cfg.Partition, n, version)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
