package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

// Config configures a Projector.
type Config struct {
	// Topic whose offsets this projector stores. Required.
	Topic string
	// Channel is the NOTIFY channel. Default projection.DefaultChannel.
	Channel string
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// LargeThreshold is the member count above which a conversation
	// switches to read fan-out (docs/large-conversations.md). Default
	// DefaultLargeThreshold. A replay must use the fanout's.
	LargeThreshold int
	// Users places users when the projection is sharded (deliveries.go):
	// the entries of users on other servers leave as deliveries. Nil:
	// every user is on this server.
	Users UserPlacement
	// Deliveries is the topic whose offsets the user stage stores
	// (ApplyDeliveries). Default DefaultDeliveries.
	Deliveries string
	// PlacementVersion is the placement version a sharded stage projects
	// under: a batch on a server fenced at a later version (a move of a
	// partition) is refused with a FencedError before it writes. 0: no
	// fence (one server).
	PlacementVersion int64
	// ConversationCache is the conversations whose state Apply keeps
	// between batches (convcache.go). Default DefaultConversationCache;
	// negative: none (every batch reads its conversations).
	ConversationCache int
}

// sqlFence reads the server's fence, holding it shared for the batch.
const sqlFence = `SELECT version FROM placement_fence FOR SHARE`

// fenced is the error of a batch under placement version mine on a server
// fenced at fence, nil when it may go on.
func fenced(mine, fence int64) error {
	if fence <= mine {
		return nil
	}
	return &FencedError{Msg: fmt.Sprintf("the placement moved on: this stage projects under version %d, the server is fenced at %d", mine, fence)}
}

// DefaultDeliveries is the deliveries topic's default name.
const DefaultDeliveries = "inboxd.events.deliveries"

// Projector applies batches of records. It is safe for concurrent use; each
// Apply is its own transaction.
type Projector struct {
	pool *pgxpool.Pool
	cfg  Config
	// Rows known to exist (committed by this projector's own transactions):
	// their INSERT ... ON CONFLICT DO NOTHING is skipped. Users and offset
	// rows are never deleted, and a replay's swap never happens under a
	// running fanout (it takes the fanout lock exclusively).
	knownMu    sync.Mutex
	knownUsers map[int64]struct{}
	knownParts map[int32]struct{}
	// cache keeps the conversations Apply committed (nil: none).
	cache *convCache
}

// maxKnownUsers bounds knownUsers; past it the set starts over.
const maxKnownUsers = 1 << 20

// New returns a Projector writing through pool.
func New(cfg Config, pool *pgxpool.Pool) (*Projector, error) {
	if cfg.Topic == "" {
		return nil, errors.New("projector: Topic is required")
	}
	if cfg.Channel == "" {
		cfg.Channel = projection.DefaultChannel
	}
	if cfg.Deliveries == "" {
		cfg.Deliveries = DefaultDeliveries
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Projector{pool: pool, cfg: cfg, cache: newConvCache(cfg.ConversationCache)}, nil
}

// Record is one log record. Event is nil for a record that could not be
// decoded (it was sent to the DLQ): it only moves the offset.
type Record struct {
	Partition int32
	Offset    int64
	Event     *events.Event
	// Appended is the record's log timestamp (its producer's clock), for
	// the fanout's latency metrics only; zero when not known.
	Appended time.Time
	// DeadLetter marks a decoded record that failed to project and was
	// sent to the DLQ: it is stored as a rejection with
	// projection.ReasonDeadLetter (so a waiting sender learns of it) and
	// takes no seq.
	DeadLetter bool
}

// Result counts what one Apply did.
type Result struct {
	Records   int // records at or above the stored offsets
	Skipped   int // records below the stored offsets (already applied)
	Messages  int // message rows written (system messages included)
	InboxRows int
	Rejected  int
	Users     int // users whose heads moved
	// Deliveries is the outbox rows a conversation stage wrote, Crossed
	// their items (entries and read positions of users on other servers).
	Deliveries, Crossed int
	// Applied is the deliveries a user stage applied, Copies those it
	// dropped as applied already (at or below their source's mark).
	Applied, Copies int
	// Conversations is the conversations the batch read from the
	// database, Cached those it took from the conversation cache, and
	// Behind those the cache held but had to read again (their
	// partition's offset had moved under it).
	Conversations, Cached, Behind int

	users []int64 // their ids (for Apply's memory of existing rows)
	// cache is what the conversation cache takes once the batch committed.
	cache *cacheUpdate
}

// Apply projects recs (in log order within each partition) in one
// transaction, skipping records already applied.
//
// The transaction's BEGIN travels in the pipeline of its first statements
// and, for a batch written with INSERTs, its COMMIT in the pipeline of its
// writes: a live batch is three round trips (offsets and state; users;
// writes and commit).
func (p *Projector) Apply(ctx context.Context, recs []Record) (Result, error) {
	c, err := p.pool.Acquire(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("acquire a connection: %w", err)
	}
	defer c.Release()
	conn := c.Conn()
	res, err := p.apply(ctx, conn, recs, true)
	if err == nil && conn.PgConn().TxStatus() != 'I' {
		// Returned before the writes (nothing new), or wrote with COPY.
		_, err = conn.Exec(ctx, "COMMIT")
	}
	if err == nil {
		p.remember(recs, res.users)
		p.cache.store(res.cache)
	}
	if err != nil {
		if conn.PgConn().TxStatus() != 'I' {
			if _, rbErr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
				// A connection in an unknown state is not reused.
				_ = conn.Close(context.WithoutCancel(ctx))
			}
		}
		return Result{}, err
	}
	return res, nil
}

// unknownParts returns the partitions whose offset rows may not exist yet
// (all of them unless own).
func (p *Projector) unknownParts(own bool, parts []int32) []int32 {
	return unknown(p, own, parts, func() map[int32]struct{} { return p.knownParts })
}

// unknownUsers returns, in order, the users whose rows may not exist yet.
func (p *Projector) unknownUsers(own bool, ids []int64) []int64 {
	return unknown(p, own, ids, func() map[int64]struct{} { return p.knownUsers })
}

// unknown returns the ids not in the set known() (read under knownMu), in
// order; all of them unless own.
func unknown[K comparable](p *Projector, own bool, ids []K, known func() map[K]struct{}) []K {
	if !own {
		return ids
	}
	p.knownMu.Lock()
	defer p.knownMu.Unlock()
	set := known()
	var out []K
	for _, id := range ids {
		if _, ok := set[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// remember records the rows a committed batch made sure of.
func (p *Projector) remember(recs []Record, users []int64) {
	p.knownMu.Lock()
	defer p.knownMu.Unlock()
	if p.knownParts == nil {
		p.knownParts, p.knownUsers = map[int32]struct{}{}, map[int64]struct{}{}
	}
	for _, r := range recs {
		p.knownParts[r.Partition] = struct{}{}
	}
	if len(p.knownUsers)+len(users) > maxKnownUsers {
		clear(p.knownUsers)
	}
	for _, u := range users {
		p.knownUsers[u] = struct{}{}
	}
}

// Forget drops what the projector remembers of the database between
// batches (the rows known to exist and the conversation cache), so that
// its next batch reads everything again: for a change made to the
// projections by hand under it (the cache trusts that a conversation
// changes only through its partition's records).
func (p *Projector) Forget() { p.forget() }

// forget drops the memory of existing rows and the conversation cache.
func (p *Projector) forget() {
	p.knownMu.Lock()
	p.knownParts, p.knownUsers = nil, nil
	p.knownMu.Unlock()
	p.cache.clear()
}

// ApplyTx is Apply inside a transaction the caller owns (replay).
func (p *Projector) ApplyTx(ctx context.Context, tx pgx.Tx, recs []Record) (Result, error) {
	return p.apply(ctx, tx, recs, false)
}

// pipe is what a batch is written through: a transaction the caller owns,
// or a connection on which apply opens (and may commit) its own.
type pipe interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

// txn is one apply of a batch: the pipe it goes through, the batch's state
// and what its round trips read.
type txn struct {
	p  *Projector
	tx pipe
	// own says that apply begins the transaction (its first pipeline
	// starts with BEGIN) and commits it in the pipeline of the writes when
	// they are INSERTs; only then may the memory of existing rows skip
	// their INSERTs.
	own    bool
	b      *batch
	parts  map[int32]int64 // partition -> next offset after this batch
	stored map[int32]int64 // partition -> stored next offset, as locked
	bases  map[int32]int64 // partition -> its delivery_base, as locked
	heads  map[int64]*head // the batch's users, locked and numbered
	out    []outboxRow     // deliveries to users on other servers (route)
	// convParts maps the batch's conversations to their partitions;
	// cached and behind count the conversations taken from the cache and
	// those it was behind on, loaded those read in the first round trip.
	convParts              map[int64]int32
	loaded, cached, behind int
	// gen is the conversation cache's generation when the batch began.
	gen int64
}

// apply projects recs through tx; own says that apply begins the
// transaction (see txn.own).
func (p *Projector) apply(ctx context.Context, tx pipe, recs []Record, own bool) (Result, error) {
	var res Result
	if len(recs) == 0 {
		return res, nil
	}
	t := &txn{p: p, tx: tx, own: own, b: newBatch(int64(p.cfg.LargeThreshold))}
	// 1. Offsets: lock, fence, and keep only what was not applied yet.
	parts, partIDs := nextOffsets(recs)
	t.parts = parts
	if err := t.lockAndLoad(ctx, recs, partIDs); err != nil {
		return res, err
	}
	live := make([]Record, 0, len(recs))
	for _, r := range recs {
		if r.Offset < t.stored[r.Partition] {
			res.Skipped++
			continue
		}
		live = append(live, r)
	}
	res.Records = len(live)
	if len(live) == 0 {
		return res, nil
	}
	// 2. The rules, in memory.
	for _, r := range live {
		t.b.apply(r)
	}
	t.route(live)
	// 3. Users: create, lock in id order, then assign inbox seqs and
	// versions and write.
	if err := t.assign(ctx); err != nil {
		return res, err
	}
	if err := t.write(ctx); err != nil {
		return res, err
	}
	b := t.b
	res.Messages = len(b.msgs)
	res.InboxRows = len(b.fan)
	res.Rejected = len(b.rejects)
	res.Users = len(t.heads)
	res.Deliveries = len(t.out)
	res.Conversations, res.Cached, res.Behind = t.loaded+t.behind, t.cached, t.behind
	res.cache = t.cacheUpdate()
	for _, o := range t.out {
		res.Crossed += len(o.d.Items)
	}
	res.users = make([]int64, 0, len(t.heads))
	for id := range t.heads {
		res.users = append(res.users, id)
	}
	return res, nil
}
