package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// Read receipts (docs/protocol.md, "Read receipts"): each member's read
// position, shown to the other members unless the member hides it
// (user_settings.hide_receipts). Nothing here writes a row: the positions
// are the records' read_seq, asked for by page or pushed to connected
// members when a read moves one.

// sqlReceipts is a page of the read positions of the current members who
// show them ($4, the caller, always sees its own).
const sqlReceipts = `SELECT s.user_id, COALESCE(r.read_seq, 0) FROM member_spans s
LEFT JOIN records r ON r.user_id = s.user_id AND r.conversation_id = s.conversation_id
LEFT JOIN user_settings us ON us.user_id = s.user_id
WHERE s.conversation_id = $1 AND s.left_seq IS NULL AND s.user_id > $2
	AND (us.hide_receipts IS NOT TRUE OR s.user_id = $4)
ORDER BY s.user_id LIMIT $3`

// handleReceipts is GET /v1/conversations/{cid}/receipts.
func (g *Gateway) handleReceipts(w http.ResponseWriter, r *http.Request) error {
	pg, err := g.memberPage(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	out := protocol.ReceiptList{ConversationID: pg.cid, Receipts: []protocol.Receipt{}}
	err = pg.read(ctx, g.pool, sqlReceipts, []any{pg.cid, pg.after, pg.limit + 1, userFrom(ctx)}, func(rs pgx.Rows) (int64, error) {
		var rc protocol.Receipt
		err := rs.Scan(&rc.UserID, &rc.ReadSeq)
		out.Receipts = append(out.Receipts, rc)
		return rc.UserID, err
	})
	if err != nil {
		return err
	}
	out.Receipts, out.NextPage = cut(pg, out.Receipts)
	apierr.WriteJSON(w, http.StatusOK, out)
	return nil
}

// receiptPusher pushes the receipts a notification names to this gateway's
// WebSocket sessions of the other current members of each conversation.
// Its queue is bounded: a receipt that finds it full is dropped (counted),
// since a receipt is a hint a client can ask again for; the LISTEN loop
// never waits on it.
type receiptPusher struct {
	pool     *pgxpool.Pool
	log      *slog.Logger
	queue    chan projection.Read
	outcomes *prometheus.CounterVec // inboxd_gateway_receipts_total

	mu    sync.Mutex
	local []localSessions // the gateway's WebSocket servers
}

// localSessions is a WebSocket server of this gateway (ws.Server).
type localSessions interface {
	LocalUsers() []int64
	Deliver(to func(user int64) bool, frame []byte, kind string) int
}

// serve adds a WebSocket server whose sessions get receipts.
func (p *receiptPusher) serve(s localSessions) {
	p.mu.Lock()
	p.local = append(p.local, s)
	p.mu.Unlock()
}

// servers returns the WebSocket servers.
func (p *receiptPusher) servers() []localSessions {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.local)
}

// receiptQueue bounds the receipts waiting to be pushed.
const receiptQueue = 4096

func newReceiptPusher(pool *pgxpool.Pool, log *slog.Logger, outcomes *prometheus.CounterVec) *receiptPusher {
	return &receiptPusher{pool: pool, log: log, outcomes: outcomes, queue: make(chan projection.Read, receiptQueue)}
}

// enqueue is the hub's Read: it never blocks.
func (p *receiptPusher) enqueue(conv, user, seq int64) {
	select {
	case p.queue <- projection.Read{Conv: conv, User: user, Seq: seq}:
	default:
		p.outcomes.WithLabelValues("dropped").Inc()
	}
}

// run pushes the queued receipts until ctx ends.
func (p *receiptPusher) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case r := <-p.queue:
			for _, s := range p.servers() {
				p.push(ctx, s, r.Conv, r.User, r.Seq)
			}
		}
	}
}

// sqlReceiptAudience is who of $2 (this gateway's users) sees the receipt
// of $3 in $1: the current members but the reader, none when the reader
// hides its receipts.
const sqlReceiptAudience = `SELECT s.user_id FROM member_spans s
WHERE s.conversation_id = $1 AND s.left_seq IS NULL AND s.user_id = ANY($2::bigint[]) AND s.user_id <> $3
	AND NOT EXISTS (SELECT 1 FROM user_settings us WHERE us.user_id = $3 AND us.hide_receipts)`

// push delivers one receipt: the reader user read conv up to seq.
func (p *receiptPusher) push(ctx context.Context, s localSessions, conv, user, seq int64) {
	local := s.LocalUsers()
	if len(local) == 0 {
		return
	}
	audience := map[int64]bool{}
	rs, err := p.pool.Query(ctx, sqlReceiptAudience, conv, local, user)
	if err != nil {
		p.log.Warn("receipt audience", "conversation_id", conv, "user_id", user, "err", err)
		return
	}
	var u int64
	if _, err := pgx.ForEachRow(rs, []any{&u}, func() error { audience[u] = true; return nil }); err != nil {
		p.log.Warn("receipt audience", "conversation_id", conv, "user_id", user, "err", fmt.Errorf("scan: %w", err))
		return
	}
	if len(audience) == 0 {
		return
	}
	frame, err := protocol.Marshal(protocol.ReceiptFrame{Type: protocol.FrameReceipt, ConversationID: conv, UserID: user, ReadSeq: seq})
	if err != nil {
		return
	}
	n := s.Deliver(func(u int64) bool { return audience[u] }, frame, protocol.FrameReceipt)
	p.outcomes.WithLabelValues("pushed").Add(float64(n))
}
