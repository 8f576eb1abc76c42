package ephemeral

import (
	"context"

	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// Read receipts: a member's read position moved (the projector's c token
// on the main channel, handed over by the hub). Like typing, a receipt is
// pushed to the local sessions of the conversation's other current
// members, read from PostgreSQL at delivery; unlike typing it is a fact of
// the projections (records.read_seq), which a client can always ask for
// again (GET .../receipts), so a dropped frame loses nothing for good.

// receiptAudience is who sees the receipt of $3 in $1 (see audience): the
// current members, none when $3 hides its receipts or $1 is in read mode
// (docs/large-conversations.md: every member's read would be a frame to
// every connected member; GET …/receipts still answers).
var receiptAudience = audience{
	byConv: `SELECT c.member_count <= $2, ARRAY(SELECT s.user_id FROM member_spans s
	WHERE s.conversation_id = $1 AND s.left_seq IS NULL AND c.member_count <= $2)
FROM conversations c WHERE c.id = $1 AND NOT c.read_fanout
	AND NOT EXISTS (SELECT 1 FROM user_settings us WHERE us.user_id = $3 AND us.hide_receipts)`,
	byList: `SELECT s.user_id FROM member_spans s
WHERE s.conversation_id = $1 AND s.left_seq IS NULL AND s.user_id = ANY($2::bigint[])
	AND NOT EXISTS (SELECT 1 FROM user_settings us WHERE us.user_id = $3 AND us.hide_receipts)
	AND NOT EXISTS (SELECT 1 FROM conversations c WHERE c.id = $1 AND c.read_fanout)`,
}

// sqlHidesReceipts says whether $1 hides its read receipts.
const sqlHidesReceipts = `SELECT EXISTS (SELECT 1 FROM user_settings WHERE user_id = $1 AND hide_receipts)`

// Receipt queues the receipt of user, who read conv up to seq, for
// delivery (the hub's Config.Read). It never blocks: a full queue drops
// it, counted.
func (s *Service) Receipt(conv, user, seq int64) {
	s.enqueue(user, token{receipt: &projection.Read{Conv: conv, User: user, Seq: seq}})
}

// deliverReceipt pushes a receipt to the local sessions of the
// conversation's other current members, unless the reader hides it.
func (s *Service) deliverReceipt(ctx context.Context, r projection.Read) error {
	if s.srv.OfConv(r.Conv) != 0 {
		// The settings are the catalog's; the audience's statements read
		// the conversation's server, whose user_settings is empty.
		var hidden bool
		if err := s.pool.QueryRow(ctx, sqlHidesReceipts, r.User).Scan(&hidden); err != nil || hidden {
			return err
		}
	}
	return s.deliverToMembers(ctx, receiptAudience, r.Conv, r.User, protocol.FrameReceipt,
		protocol.ReceiptFrame{Type: protocol.FrameReceipt, ConversationID: r.Conv, UserID: r.User, ReadSeq: r.Seq}, r.User)
}
