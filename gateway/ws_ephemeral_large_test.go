package gateway

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// Read-mode conversations (large ones, channels) share no presence and
// push no live receipts (docs/large-conversations.md): user 2 shares only
// a channel with user 1, user 3 a write-mode conversation. 3 sees 1 come
// online and read; 2 sees neither, and GET /v1/presence leaves 1 out for
// 2; GET …/receipts still answers 2.
func TestEphemeralNotInReadMode(t *testing.T) {
	a, _ := twoEphemeralGateways(t)
	u1, u2, u3 := a.user(t, 1), a.user(t, 2), a.user(t, 3)
	ch := u1.create(t, "channel", 2)
	setReadFanout(t, a.tgw, ch, true)
	dm := u1.create(t, "dm", 3)
	s2, s3 := connect(t, a, u2), connect(t, a, u3)

	c1 := dialWS(t, a, u1)
	c1.hello(t, 0, nil)
	s3.waitEphemeral(t, "1 online, for 3", presenceOf(1, true))
	require.Equal(t, []protocol.Presence{{UserID: 1, Online: true}}, u3.lookup(t, 1))
	require.Equal(t, []protocol.Presence{{UserID: 2, Online: true}}, u2.lookup(t, 1, 2), "1 is left out for 2")

	// 1 reads what the others sent (its own sends move its position).
	for cid, from := range map[int64]*user{ch: u2, dm: u3} {
		m := from.send(t, cid, "hello")
		r := u1.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/read", cid), map[string]any{"seq": m.Seq})
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	}
	s3.waitOther(t, func(f protocol.ServerFrame) bool { return f.Type == protocol.FrameReceipt && f.UserID == 1 })
	var list protocol.ReceiptList
	waitFor(t, 30*time.Second, "the channel's receipt readable", func() bool {
		r := u2.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/receipts", ch), nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		r.decode(t, &list)
		for _, rc := range list.Receipts {
			if rc.UserID == 1 && rc.ReadSeq > 0 {
				return true
			}
		}
		return false
	})
	// The dm's receipt reached 3; the channel's went nowhere.
	time.Sleep(300 * time.Millisecond)
	require.Empty(t, presenceFrames(s2, 1), "no presence through a channel")
	s2.mu.Lock()
	defer s2.mu.Unlock()
	for _, f := range s2.others {
		require.NotEqual(t, protocol.FrameReceipt, f.Type, "no live receipt in a channel: %+v", f)
	}
}
