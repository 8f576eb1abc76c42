package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
)

// TestSetRole: the owner makes an admin, the admin a moderator, a
// moderator is refused; the owner hands ownership over; Members shows
// every member's role.
func TestSetRole(t *testing.T) {
	w := newWorld(t, nil, nil)
	ctx := context.Background()
	alice, bob, carol := w.direct(t, 1), w.direct(t, 2), w.direct(t, 3)
	cid, err := alice.CreateConversation(ctx, "roles", 2, 3)
	require.NoError(t, err)
	roles := func() map[int64]string {
		ms, err := alice.Members(ctx, cid)
		require.NoError(t, err)
		out := map[int64]string{}
		for _, m := range ms {
			out[m.UserID] = m.Role
		}
		return out
	}
	require.Equal(t, map[int64]string{1: "owner", 2: "member", 3: "member"}, roles())
	require.NoError(t, alice.SetRole(ctx, cid, 2, "admin"))
	require.NoError(t, bob.SetRole(ctx, cid, 3, "moderator"))
	require.Equal(t, map[int64]string{1: "owner", 2: "admin", 3: "moderator"}, roles())

	for _, c := range []struct {
		who    *client.Client
		user   int64
		role   string
		status int
	}{
		{carol, 2, "member", http.StatusForbidden}, // a moderator sets no roles
		{bob, 1, "member", http.StatusForbidden},   // nor does an admin set the owner's
		{alice, 9, "admin", http.StatusNotFound},   // no such member
		{alice, 2, "boss", http.StatusBadRequest},  // no such role
	} {
		err := c.who.SetRole(ctx, cid, c.user, c.role)
		var ae *client.APIError
		require.True(t, errors.As(err, &ae), "%d %s: %v", c.user, c.role, err)
		require.Equal(t, c.status, ae.Status, "%d %s: %v", c.user, c.role, err)
	}

	require.NoError(t, alice.SetRole(ctx, cid, 2, "owner"), "a transfer")
	require.Equal(t, map[int64]string{1: "admin", 2: "owner", 3: "moderator"}, roles())
}

// TestBanAndMute: a moderator bans and mutes members through the SDK and
// lists them, then lifts them; a member may not list the bans, nor ban.
func TestBanAndMute(t *testing.T) {
	w := newWorld(t, nil, nil)
	ctx := context.Background()
	alice, bob, carol := w.direct(t, 1), w.direct(t, 2), w.direct(t, 3)
	cid, err := alice.CreateConversation(ctx, "moderated", 2, 3, 4)
	require.NoError(t, err)
	require.NoError(t, alice.SetRole(ctx, cid, 2, "moderator"))

	until := time.Now().Add(time.Hour)
	require.NoError(t, bob.Ban(ctx, cid, 4, &until))
	require.NoError(t, bob.Mute(ctx, cid, 3, nil))
	bans, err := bob.Bans(ctx, cid)
	require.NoError(t, err)
	require.Len(t, bans, 1)
	require.Equal(t, int64(4), bans[0].UserID)
	require.WithinDuration(t, until, *bans[0].Until, time.Millisecond)
	mutes, err := alice.Mutes(ctx, cid)
	require.NoError(t, err)
	require.Equal(t, []int64{3}, []int64{mutes[0].UserID})

	var ae *client.APIError
	require.True(t, errors.As(carol.Ban(ctx, cid, 2, nil), &ae))
	require.Equal(t, http.StatusForbidden, ae.Status)
	_, err = carol.Bans(ctx, cid)
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, http.StatusForbidden, ae.Status)

	require.NoError(t, bob.Unmute(ctx, cid, 3))
	require.NoError(t, bob.Unban(ctx, cid, 4))
	bans, err = bob.Bans(ctx, cid)
	require.NoError(t, err)
	require.Empty(t, bans)
	mutes, err = bob.Mutes(ctx, cid)
	require.NoError(t, err)
	require.Empty(t, mutes)
}

// TestUpdateConversation: the owner renames and freezes, a moderator sets
// the slow mode but may not freeze; the records the client lists show the
// settings and the caller's role.
func TestUpdateConversation(t *testing.T) {
	w := newWorld(t, nil, nil)
	ctx := context.Background()
	alice, bob := w.direct(t, 1), w.direct(t, 2)
	cid, err := alice.CreateConversation(ctx, "before", 2)
	require.NoError(t, err)
	require.NoError(t, alice.SetRole(ctx, cid, 2, "moderator"))
	title, yes, thirty := "after", true, 30
	require.NoError(t, alice.UpdateConversation(ctx, cid, client.ConversationSettings{Title: &title, Frozen: &yes}))
	require.NoError(t, bob.UpdateConversation(ctx, cid, client.ConversationSettings{SlowMode: &thirty}))
	err = bob.UpdateConversation(ctx, cid, client.ConversationSettings{Frozen: &yes})
	var ae *client.APIError
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, http.StatusForbidden, ae.Status)
	require.Error(t, bob.UpdateConversation(ctx, cid, client.ConversationSettings{}), "nothing to change")

	recs, err := bob.Conversations(ctx)
	require.NoError(t, err)
	var got *client.Record
	for i := range recs {
		if recs[i].ConversationID == cid {
			got = &recs[i]
		}
	}
	require.NotNil(t, got)
	require.Equal(t, "after", got.Title)
	require.True(t, got.Frozen)
	require.Equal(t, 30, got.SlowMode)
	require.Equal(t, "moderator", got.Role)
}
