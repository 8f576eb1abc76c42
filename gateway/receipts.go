package gateway

import (
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
