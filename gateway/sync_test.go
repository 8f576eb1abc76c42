package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
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
	absorb := func(entries []wEntry) {
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
	require.Equal(t, "first", s.Entries[0].Message.text(t))
	require.Equal(t, m2.MsgID, s.Entries[1].Message.MsgID)
	require.Equal(t, "second", s.Entries[1].Message.text(t))
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
		var l wList
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
			var h struct {
				Messages []wMessage `json:"messages"`
				HasMore  bool       `json:"has_more"`
			}
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
	rows, err := tg.env.Pool.Query(context.Background(), `SELECT m.conversation_id, m.seq FROM messages m
		JOIN member_spans s ON s.conversation_id = m.conversation_id AND s.user_id = $1
		AND m.seq >= s.joined_seq AND (s.left_seq IS NULL OR m.seq <= s.left_seq)`, reader)
	require.NoError(t, err)
	visible := 0
	for rows.Next() {
		var c, seq int64
		require.NoError(t, rows.Scan(&c, &seq))
		require.True(t, have[c][seq], "message %d/%d visible to the reader but never received", c, seq)
		visible++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 200+2+230+510, visible)
	tg.verify(t)
}
