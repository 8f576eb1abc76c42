package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// TestOfflineUserSync is acceptance 1: a user in 200 conversations catches
// up with one question; paging takes the expected number of requests; a
// too-long answer plus history backfill leaves nothing visible missing.
func TestOfflineUserSync(t *testing.T) {
	tg := newGateway(t, nil)
	const reader = 1
	u := tg.user(t, reader)
	creators := []*user{tg.user(t, 2), tg.user(t, 3), tg.user(t, 4)}

	convs := make([]int64, 200)
	parallel(t, len(convs), 8, func(i int) error {
		cid, err := creators[i%3].createE(fmt.Sprintf("conv %d", i), reader)
		convs[i] = cid
		return err
	})

	// The client's state: everything it has seen, per conversation.
	have := map[int64]map[int64]bool{}
	absorb := func(entries []protocol.Entry) {
		for _, e := range entries {
			if e.Kind == "message" {
				if have[e.ConversationID] == nil {
					have[e.ConversationID] = map[int64]bool{}
				}
				have[e.ConversationID][e.Message.Seq] = true
			}
		}
	}
	all, cursor, _ := u.syncAll(t, 0, 200)
	requireContiguous(t, 0, all)
	require.Len(t, all, 400) // a created message and a record per conversation
	absorb(all)

	// Offline: 2 messages in 2 conversations; one sync returns exactly them.
	m1 := creators[0].send(t, convs[0], "first")
	m2 := creators[1].send(t, convs[1], "second")

	s := u.sync(t, "after="+strconv.FormatInt(cursor, 10))
	require.False(t, s.TooLong)
	require.Len(t, s.Entries, 2)
	requireContiguous(t, cursor, s.Entries)
	require.Equal(t, m1.MsgID, s.Entries[0].Message.MsgID)
	require.Equal(t, "first", msgText(t, s.Entries[0].Message))
	require.Equal(t, m2.MsgID, s.Entries[1].Message.MsgID)
	require.Equal(t, "second", msgText(t, s.Entries[1].Message))
	require.False(t, s.HasMore)
	absorb(s.Entries)
	cursor = s.Head

	// 230 messages in 3 groups: 5 pages of 50, every entry once, in order.
	// owner(k) created convs[k] and may send to it.
	owner := func(k int) *user { return creators[k%3] }
	parallel(t, 230, 6, func(i int) error {
		k := 10 + i%3
		_, err := owner(k).sendE(convs[k], "m"+strconv.Itoa(i))
		return err
	})
	entries, head, requests := u.syncAll(t, cursor, 50)
	require.Equal(t, 5, requests)
	require.Len(t, entries, 230)
	requireContiguous(t, cursor, entries)
	require.Equal(t, cursor+230, head)
	lastSeq := map[int64]int64{}
	for _, e := range entries {
		require.Greater(t, e.Message.Seq, lastSeq[e.ConversationID], "I4: ascending per conversation")
		lastSeq[e.ConversationID] = e.Message.Seq
	}
	absorb(entries)
	cursor = head

	// More than 500: too long, with the head and the conversation list.
	spread := convs[20:30]
	parallel(t, 510, 8, func(i int) error {
		k := 20 + i%10
		_, err := owner(k).sendE(convs[k], "x"+strconv.Itoa(i))
		return err
	})
	s = u.sync(t, "after="+strconv.FormatInt(cursor, 10))
	require.True(t, s.TooLong)
	require.Empty(t, s.Entries)
	require.Equal(t, cursor+510, s.Head)
	require.NotNil(t, s.Polling)
	records := s.Conversations
	require.Len(t, records, 50)
	next := s.NextPage
	for next != nil {
		var l protocol.ConversationList
		r := u.do(t, "GET", "/v1/conversations?page="+url.QueryEscape(*next), nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		r.decode(t, &l)
		records = append(records, l.Conversations...)
		next = l.NextPage
	}
	require.Len(t, records, 200)
	seen := map[int64]bool{}
	for _, rec := range records {
		require.False(t, seen[rec.ConversationID], "conversation %d listed twice", rec.ConversationID)
		seen[rec.ConversationID] = true
	}
	// The ten busy conversations come first (most recent activity).
	for _, rec := range records[:10] {
		require.Contains(t, spread, rec.ConversationID)
	}
	cursor = s.Head

	// Backfill each conversation's hole from its last seq down to what
	// the client has.
	for _, rec := range records {
		known := have[rec.ConversationID]
		before := rec.LastSeq + 1
		for before > 1 && !known[before-1] {
			var h protocol.History
			r := u.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/messages?before=%d&limit=200", rec.ConversationID, before), nil)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			r.decode(t, &h)
			require.NotEmpty(t, h.Messages)
			for _, m := range h.Messages {
				known[m.Seq] = true
			}
			before = h.Messages[0].Seq
			if !h.HasMore {
				break
			}
		}
	}
	// Nothing new after the head, and nothing visible missing.
	after := u.sync(t, "after="+strconv.FormatInt(cursor, 10))
	require.False(t, after.TooLong)
	require.Empty(t, after.Entries)
	visible := 0
	for _, pool := range tg.env.Pools { // messages and spans are on their conversations' servers
		rows, err := pool.Query(context.Background(), `SELECT m.conversation_id, m.seq FROM messages m
		JOIN member_spans s ON s.conversation_id = m.conversation_id AND s.user_id = $1
		AND m.seq >= s.joined_seq AND (s.left_seq IS NULL OR m.seq <= s.left_seq)`, reader)
		require.NoError(t, err)
		for rows.Next() {
			var c, seq int64
			require.NoError(t, rows.Scan(&c, &seq))
			require.True(t, have[c][seq], "message %d/%d visible to the reader but never received", c, seq)
			visible++
		}
		require.NoError(t, rows.Err())
	}
	require.Equal(t, 200+2+230+510, visible)
	tg.verify(t)
}

// TestSyncETag: the ETag names epoch and head; a matching If-None-Match
// with nothing new is a 304, anything new is a 200.
func TestSyncETag(t *testing.T) {
	tg := newGateway(t, nil)
	a := tg.user(t, 1)
	cid := a.create(t, "etag")
	r := a.do(t, "GET", "/v1/sync", nil)
	require.Equal(t, http.StatusOK, r.status)
	var s protocol.SyncAnswer
	r.decode(t, &s)
	etag := r.header.Get("ETag")
	require.Equal(t, fmt.Sprintf(`"%d.%d"`, s.Epoch, s.Head), etag)
	head := strconv.FormatInt(s.Head, 10)

	for _, inm := range []string{etag, "W/" + etag, `"x", ` + etag, "*"} {
		r = a.do(t, "GET", "/v1/sync?after="+head, nil, "If-None-Match", inm)
		require.Equal(t, http.StatusNotModified, r.status, "If-None-Match %s: %s", inm, r)
		require.Empty(t, r.body)
		require.Equal(t, etag, r.header.Get("ETag"))
	}
	// Entries after the cursor are never hidden by a matching tag.
	r = a.do(t, "GET", "/v1/sync?after=0", nil, "If-None-Match", etag)
	require.Equal(t, http.StatusOK, r.status)
	// Something new: the old tag no longer matches.
	a.send(t, cid, "new")
	r = a.do(t, "GET", "/v1/sync?after="+head, nil, "If-None-Match", etag)
	require.Equal(t, http.StatusOK, r.status)
	r.decode(t, &s)
	require.Len(t, s.Entries, 1)
	require.NotEqual(t, etag, r.header.Get("ETag"))
}

// TestSyncTooLongRules checks each too-long condition of docs/protocol.md and
// the page boundaries.
func TestSyncTooLongRules(t *testing.T) {
	tg := newGateway(t, func(c *Config) { c.TooLongLag = 5 })
	a := tg.user(t, 1)
	cid := a.create(t, "t")
	for i := 0; i < 6; i++ {
		a.send(t, cid, "m"+strconv.Itoa(i))
	}
	// head 8: the created message, the record, six texts
	s := a.sync(t, "after=3&limit=2")
	require.False(t, s.TooLong, "lag 5 is not too long")
	require.Len(t, s.Entries, 2)
	require.True(t, s.HasMore)
	requireContiguous(t, 3, s.Entries)
	epoch := strconv.FormatInt(s.Epoch, 10)

	tooLong := func(q string) protocol.SyncAnswer {
		t.Helper()
		s := a.sync(t, q)
		require.True(t, s.TooLong, q)
		require.Empty(t, s.Entries, q)
		require.Equal(t, int64(8), s.Head, q)
		require.Len(t, s.Conversations, 1, q)
		require.Equal(t, int64(7), s.Conversations[0].LastSeq, q)
		return s
	}
	tooLong("after=2")
	tooLong("after=0")
	tooLong("after=7&epoch=" + strconv.FormatInt(s.Epoch-1, 10))
	s = a.sync(t, "after=7&epoch="+epoch)
	require.False(t, s.TooLong)
	require.Len(t, s.Entries, 1)
	s = a.sync(t, "after=0&limit=1&epoch=123") // a fresh client: no cursor to refuse
	require.True(t, s.TooLong, "lag 8 is too long whatever the epoch")

	// Retention moved the floor past the cursor.
	_, err := tg.env.UserPool(1).Exec(context.Background(), `UPDATE users SET inbox_floor = 6 WHERE id = 1`)
	require.NoError(t, err)
	tooLong("after=5")
	s = a.sync(t, "after=6")
	require.False(t, s.TooLong)
	require.Len(t, s.Entries, 2)
}

// TestConversationList: pinned first then recent activity, keyset paging
// that returns each record once, since_version with tombstones.
func TestConversationList(t *testing.T) {
	tg := newGateway(t, nil)
	a, b := tg.user(t, 1), tg.user(t, 2)
	var convs []int64
	for i := 0; i < 5; i++ {
		convs = append(convs, b.create(t, "c"+strconv.Itoa(i), 1))
	}
	// Activity order (newest first): 1, 4, 3, 2, 0; then pin 2.
	for _, i := range []int{0, 2, 3, 4, 1} {
		b.send(t, convs[i], "activity")
	}
	r := a.do(t, "PATCH", fmt.Sprintf("/v1/conversations/%d/record", convs[2]), `{"pinned":true}`)
	require.Equal(t, http.StatusAccepted, r.status)
	tg.env.WaitCaughtUp(t, 30*time.Second)

	var order []int64
	page := ""
	requests := 0
	for {
		var l protocol.ConversationList
		r := a.do(t, "GET", "/v1/conversations?limit=2"+page, nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		r.decode(t, &l)
		requests++
		for _, rec := range l.Conversations {
			order = append(order, rec.ConversationID)
		}
		if l.NextPage == nil {
			break
		}
		page = "&page=" + url.QueryEscape(*l.NextPage)
	}
	require.Equal(t, 3, requests)
	require.Equal(t, []int64{convs[2], convs[1], convs[4], convs[3], convs[0]}, order)

	// since_version: only what changed after V, in version order, removals
	// included as tombstones.
	var l protocol.ConversationList
	a.do(t, "GET", "/v1/conversations", nil).decode(t, &l)
	v := l.RecordVersion
	r = b.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/1", convs[4]), nil)
	require.Equal(t, http.StatusAccepted, r.status)
	r = a.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/read", convs[0]), `{"seq":2}`)
	require.Equal(t, http.StatusAccepted, r.status)
	tg.env.WaitCaughtUp(t, 30*time.Second)
	r = a.do(t, "GET", "/v1/conversations?limit=1&since_version="+strconv.FormatInt(v, 10), nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	r.decode(t, &l)
	require.Len(t, l.Conversations, 1)
	require.Equal(t, convs[4], l.Conversations[0].ConversationID)
	require.True(t, l.Conversations[0].Removed)
	require.Equal(t, v+1, l.Conversations[0].Version)
	require.NotNil(t, l.NextPage)
	r = a.do(t, "GET", "/v1/conversations?limit=1&page="+url.QueryEscape(*l.NextPage), nil)
	r.decode(t, &l)
	require.Len(t, l.Conversations, 1)
	require.Equal(t, convs[0], l.Conversations[0].ConversationID)
	require.Equal(t, int64(2), l.Conversations[0].ReadSeq)
	require.Nil(t, l.NextPage)
	require.Equal(t, v+2, l.RecordVersion)
}
