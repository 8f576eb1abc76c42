package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// The conversation list pages by next_page tokens and also by page numbers
// (page=1, page=2, ...); both walk the same order.
func TestListPageNumbers(t *testing.T) {
	tg := newGateway(t, nil)
	a := tg.user(t, 1)
	for i := 0; i < 7; i++ {
		a.create(t, fmt.Sprint("c", i))
	}
	var byToken []int64
	path := "/v1/conversations?limit=3"
	for {
		var l protocol.ConversationList
		a.do(t, "GET", path, nil).decode(t, &l)
		for _, r := range l.Conversations {
			byToken = append(byToken, r.ConversationID)
		}
		if l.NextPage == nil {
			break
		}
		path = "/v1/conversations?limit=3&page=" + *l.NextPage
	}
	var byNumber []int64
	for p := 1; p <= 4; p++ {
		var l protocol.ConversationList
		r := a.do(t, "GET", "/v1/conversations?limit=3&page="+strconv.Itoa(p), nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		r.decode(t, &l)
		for _, c := range l.Conversations {
			byNumber = append(byNumber, c.ConversationID)
		}
	}
	require.Len(t, byToken, 7)
	require.Equal(t, byToken, byNumber)
	require.Equal(t, http.StatusBadRequest, a.do(t, "GET", "/v1/conversations?page=0", nil).status)
	require.Equal(t, http.StatusBadRequest, a.do(t, "GET", "/v1/conversations?page=-1", nil).status)
}

// A long-poll that ends with nothing new answers 200 with entries: [] even
// when If-None-Match matches (docs/protocol.md's wait rule); without wait the
// same request is a 304.
func TestLongPollEndsWith200(t *testing.T) {
	tg := newGateway(t, nil)
	a := tg.user(t, 1)
	a.create(t, "x")
	r := a.do(t, "GET", "/v1/sync", nil)
	var s protocol.SyncAnswer
	r.decode(t, &s)
	etag := r.header.Get("ETag")
	head := strconv.FormatInt(s.Head, 10)
	start := time.Now()
	r = a.do(t, "GET", "/v1/sync?wait=1&after="+head, nil, "If-None-Match", etag)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond, "it was held")
	r.decode(t, &s)
	require.Empty(t, s.Entries)
	require.NotNil(t, s.Entries, "entries is [] not null")
	r = a.do(t, "GET", "/v1/sync?after="+head, nil, "If-None-Match", etag)
	require.Equal(t, http.StatusNotModified, r.status)
}
