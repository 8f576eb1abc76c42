package gateway

import (
	"context"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
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

// sqlReceiptsAll is sqlReceipts without the settings, on the
// conversation's server of a sharded placement (its copies of the members'
// records hold their read positions); sqlHidingReceipts then names those
// of them who hide theirs, from the settings on the catalog.
const (
	sqlReceiptsAll = `SELECT s.user_id, COALESCE(r.read_seq, 0) FROM member_spans s
LEFT JOIN records r ON r.user_id = s.user_id AND r.conversation_id = s.conversation_id
WHERE s.conversation_id = $1 AND s.left_seq IS NULL AND s.user_id > $2
ORDER BY s.user_id LIMIT $3`
	sqlHidingReceipts = `SELECT user_id FROM user_settings WHERE user_id = ANY($1::bigint[]) AND hide_receipts`
)

// receiptsApart reads a receipts page across servers: rows of the
// conversation's server, less the members who hide theirs (but the
// caller), until limit+1 are kept or the members end.
func (g *Gateway) receiptsApart(ctx context.Context, pg *memberPage, caller int64) ([]protocol.Receipt, error) {
	out := []protocol.Receipt{}
	after := pg.after
	for int64(len(out)) <= pg.limit {
		var batch []protocol.Receipt
		rs, err := g.srv.Conv(pg.cid).Query(ctx, sqlReceiptsAll, pg.cid, after, pg.limit+1)
		if err != nil {
			return nil, fmt.Errorf("receipts of %d: %w", pg.cid, err)
		}
		for rs.Next() {
			var rc protocol.Receipt
			if err := rs.Scan(&rc.UserID, &rc.ReadSeq); err != nil {
				rs.Close()
				return nil, fmt.Errorf("receipts of %d: %w", pg.cid, err)
			}
			batch = append(batch, rc)
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, fmt.Errorf("receipts of %d: %w", pg.cid, err)
		}
		if len(batch) == 0 {
			break
		}
		ids := make([]int64, len(batch))
		for i, rc := range batch {
			ids[i] = rc.UserID
		}
		hidden := map[int64]bool{}
		rs, err = g.srv.Catalog().Query(ctx, sqlHidingReceipts, ids)
		if err != nil {
			return nil, fmt.Errorf("receipt settings of %d members: %w", len(ids), err)
		}
		for rs.Next() {
			var u int64
			if err := rs.Scan(&u); err != nil {
				rs.Close()
				return nil, fmt.Errorf("receipt settings: %w", err)
			}
			hidden[u] = true
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, fmt.Errorf("receipt settings: %w", err)
		}
		for _, rc := range batch {
			if !hidden[rc.UserID] || rc.UserID == caller {
				out = append(out, rc)
				pg.last = append(pg.last, rc.UserID)
			}
		}
		if int64(len(batch)) <= pg.limit {
			break // the members ended
		}
		after = batch[len(batch)-1].UserID
	}
	return out, nil
}

// receiptsPage reads the receipts of pg as caller sees them (limit+1 at
// most, for cut).
func (g *Gateway) receiptsPage(ctx context.Context, pg *memberPage, caller int64) ([]protocol.Receipt, error) {
	if g.srv.Sharded() {
		return g.receiptsApart(ctx, pg, caller)
	}
	out := []protocol.Receipt{}
	err := pg.read(ctx, g.pool, sqlReceipts, []any{pg.cid, pg.after, pg.limit + 1, caller}, func(rs pgx.Rows) (int64, error) {
		var rc protocol.Receipt
		err := rs.Scan(&rc.UserID, &rc.ReadSeq)
		out = append(out, rc)
		return rc.UserID, err
	})
	return out, err
}

// handleReceipts is GET /v1/conversations/{cid}/receipts.
func (g *Gateway) handleReceipts(w http.ResponseWriter, r *http.Request) error {
	pg, err := g.memberPage(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	out := protocol.ReceiptList{ConversationID: pg.cid, Receipts: []protocol.Receipt{}}
	if out.Receipts, err = g.receiptsPage(ctx, pg, userFrom(ctx)); err != nil {
		return err
	}
	out.Receipts, out.NextPage = cut(pg, out.Receipts)
	// The receipts of users the caller blocks are left out after the
	// page is cut, so that next_page still follows the members read: a
	// page may hold fewer than limit.
	blocked, err := g.blocks.of(ctx, userFrom(ctx))
	if err != nil {
		return err
	}
	if len(blocked) > 0 {
		kept := out.Receipts[:0]
		for _, rc := range out.Receipts {
			if !blocked.Has(rc.UserID) {
				kept = append(kept, rc)
			}
		}
		out.Receipts = kept
	}
	apierr.WriteJSON(w, http.StatusOK, out)
	return nil
}
