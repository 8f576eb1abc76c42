package gateway

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// Read receipts: a member's read reaches the other members
// connected to any gateway as a receipt frame, and the receipts endpoint;
// a non-member sees neither; a member who hides its receipts is in neither;
// no inbox row is written for the other members.
func TestReceipts(t *testing.T) {
	a := newWSGateway(t, nil, WSConfig{})
	b := newWSGatewayOn(t, a.env, wsOpts{}) // a second gateway process
	ua, ub, uc, ud := a.user(t, 1), b.user(t, 2), b.user(t, 3), a.user(t, 4)
	cid := ua.create(t, "r", 2, 4)
	other := uc.create(t, "other", 2) // c shares a conversation with b, not with a
	ua.send(t, cid, "one")
	ua.send(t, cid, "two")
	_ = other

	// b (a member) and c (not a member) are connected to gateway b.
	sb := dialWS(t, b, ub).stream(t, ub.head(t), nil).started(t)
	sc := dialWS(t, b, uc).stream(t, uc.head(t), nil).started(t)
	headB := ub.head(t)

	// d reads on gateway a: b sees it live; nothing is added to b's inbox.
	r := ud.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/read", cid), map[string]any{"seq": 2})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	f := sb.waitOther(t, func(f protocol.ServerFrame) bool { return f.Type == protocol.FrameReceipt && f.UserID == 4 })
	require.Equal(t, cid, f.ConversationID)
	require.Equal(t, int64(2), f.ReadSeq)
	require.Equal(t, headB, ub.head(t), "a receipt is no inbox entry of another member")

	// The endpoint: every member's position (a's own send moved a's to 3).
	var list protocol.ReceiptList
	r = ub.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/receipts", cid), nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	r.decode(t, &list)
	require.Equal(t, []protocol.Receipt{{UserID: 1, ReadSeq: 3}, {UserID: 2, ReadSeq: 1}, {UserID: 4, ReadSeq: 2}}, list.Receipts)
	r = uc.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/receipts", cid), nil)
	require.Equal(t, http.StatusForbidden, r.status, "%s", r)
	r = ub.do(t, "GET", "/v1/conversations/999999/receipts", nil)
	require.Equal(t, http.StatusNotFound, r.status, "%s", r)

	// d hides its receipts: its next read is not pushed (a's read after it
	// is, and comes through the same queue), and the endpoint leaves it out
	// for others but not for d.
	_, err := a.env.Pool.Exec(context.Background(),
		`INSERT INTO user_settings (user_id, hide_receipts) VALUES (4, true)
		 ON CONFLICT (user_id) DO UPDATE SET hide_receipts = true`)
	require.NoError(t, err)
	sa := dialWS(t, a, ua).stream(t, ua.head(t), nil).started(t)
	ua.send(t, cid, "three")
	r = ud.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/read", cid), map[string]any{"seq": 4})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	r = ub.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/read", cid), map[string]any{"seq": 3})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	r = ub.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/read", cid), map[string]any{"seq": 2}) // not a move
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	ua.send(t, cid, "four")
	r = ub.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/read", cid), map[string]any{"seq": 5})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	// The receipts of one gateway are pushed in the order of the log: once
	// b's last read reached a, d's hidden one (before it) would have too.
	sa.waitOther(t, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.FrameReceipt && f.UserID == 2 && f.ReadSeq == 5
	})
	sa.mu.Lock()
	var seen []int64
	for _, f := range sa.others {
		require.False(t, f.Type == protocol.FrameReceipt && f.UserID == 4, "a hidden receipt was pushed")
		if f.Type == protocol.FrameReceipt {
			seen = append(seen, f.ReadSeq)
		}
	}
	sa.mu.Unlock()
	require.Equal(t, []int64{3, 5}, seen, "b's receipts, each move once, none for a read that did not move")
	r = ub.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/receipts", cid), nil)
	r.decode(t, &list)
	require.Equal(t, []protocol.Receipt{{UserID: 1, ReadSeq: 5}, {UserID: 2, ReadSeq: 5}}, list.Receipts)
	r = ud.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/receipts?limit=1&page=3", cid), nil)
	r.decode(t, &list)
	require.Equal(t, []protocol.Receipt{{UserID: 4, ReadSeq: 4}}, list.Receipts, "one's own, hidden or not")

	// c, who shares no conversation with a, b or d in cid, got no receipt.
	sc.mu.Lock()
	for _, f := range sc.others {
		require.NotEqual(t, protocol.FrameReceipt, f.Type, "a receipt reached a non-member")
	}
	sc.mu.Unlock()
}
