package gateway

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// GET /v1/conversations/{cid}/members lists the current members by user id,
// page by page, each exactly once; only current members may ask.
func TestMemberList(t *testing.T) {
	tg := newGateway(t, nil)
	a := tg.user(t, 1)
	g := a.create(t, "group", 5, 3, 9, 7)
	r := a.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/9", g), nil)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	r = a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", g), `{"user_id": 11}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)

	list := func(u *user, query string) (int, protocol.MemberList) {
		r := u.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/members?%s", g, query), nil)
		var l protocol.MemberList
		if r.status == http.StatusOK {
			r.decode(t, &l)
		}
		return r.status, l
	}
	var got []protocol.Member
	page := "limit=2"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		status, l := list(a, page)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, g, l.ConversationID)
		require.LessOrEqual(t, len(l.Members), 2)
		got = append(got, l.Members...)
		if l.NextPage == nil {
			break
		}
		page = "limit=2&page=" + *l.NextPage
	}
	var ids []int64
	for _, m := range got {
		ids = append(ids, m.UserID)
	}
	require.Equal(t, []int64{1, 3, 5, 7, 11}, ids, "current members, ascending, each once; the removed one absent")
	require.EqualValues(t, 1, got[0].JoinedSeq, "the creation's seq")
	h := a.history(t, g, "")
	require.Equal(t, h.Messages[len(h.Messages)-1].Seq, got[4].JoinedSeq, "the member.added's seq")

	status, all := list(a, "")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, all.Members, 5)
	require.Nil(t, all.NextPage)

	status, _ = list(tg.user(t, 9), "")
	require.Equal(t, http.StatusForbidden, status, "a removed member")
	status, _ = list(tg.user(t, 2), "")
	require.Equal(t, http.StatusForbidden, status, "a stranger")
	r = a.do(t, "GET", "/v1/conversations/999999/members", nil)
	require.Equal(t, http.StatusNotFound, r.status)
	for _, q := range []string{"limit=0", "limit=1001", "page=x", "page=-1"} {
		status, _ = list(a, q)
		require.Equal(t, http.StatusBadRequest, status, q)
	}
}
