package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/gateway/ephemeral"
)

// TestTypingAndPresence: SendTyping reaches the other member's OnTyping,
// OnPresence follows a partner's connection and hidden presence, and the
// Presence, Settings and SetSettings calls answer.
func TestTypingAndPresence(t *testing.T) {
	noClientGoroutines(t)
	w := newWorld(t, func(c *gateway.Config) {
		c.Ephemeral = gateway.EphemeralConfig{PresenceGrace: 200 * time.Millisecond, PresenceExpiry: time.Second}
	}, nil)
	ctx := context.Background()
	cid, err := w.direct(t, 1).CreateConversation(ctx, "typing", 2)
	require.NoError(t, err)

	var mu sync.Mutex
	var typing []client.TypingEvent
	var presence []client.PresenceEvent
	ba := newApp()
	bcfg := w.config(t, w.url, 2, ba)
	bcfg.Transport = client.TransportWebSocket
	bcfg.Handler.OnTyping = func(e client.TypingEvent) { mu.Lock(); typing = append(typing, e); mu.Unlock() }
	bcfg.Handler.OnPresence = func(e client.PresenceEvent) { mu.Lock(); presence = append(presence, e); mu.Unlock() }
	bob, err := client.New(bcfg)
	require.NoError(t, err)
	start(t, bob, ba)
	// Bob's session is up once SendTyping finds it (a stop with nothing to
	// stop is dropped by the server): then alice comes online.
	waitFor(t, 30*time.Second, "bob's WebSocket", func() bool { return bob.SendTyping(ctx, cid, true) == nil })

	aa := newApp()
	acfg := w.config(t, w.url, 1, aa)
	acfg.Transport = client.TransportWebSocket
	alice, err := client.New(acfg)
	require.NoError(t, err)
	require.ErrorIs(t, alice.SendTyping(ctx, cid, false), client.ErrNotConnected, "not running")
	start(t, alice, aa)

	waitFor(t, 30*time.Second, "alice online for bob", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(presence) > 0 && presence[len(presence)-1].UserID == 1 && presence[len(presence)-1].Online
	})
	waitFor(t, 30*time.Second, "alice's typing sent", func() bool {
		err := alice.SendTyping(ctx, cid, false)
		require.True(t, err == nil || errors.Is(err, client.ErrNotConnected), "%v", err)
		return err == nil
	})
	waitFor(t, 30*time.Second, "bob told alice types", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(typing) > 0
	})
	mu.Lock()
	require.Equal(t, client.TypingEvent{ConversationID: cid, UserID: 1, ExpiresIn: ephemeral.DefaultTypingExpiry}, typing[0])
	mu.Unlock()
	require.NoError(t, alice.SendTyping(ctx, cid, true))
	waitFor(t, 30*time.Second, "bob told alice stopped", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(typing) == 2 && typing[1].Stop
	})

	p, err := bob.Presence(ctx, 1, 2, 99)
	require.NoError(t, err)
	require.Equal(t, []client.Presence{{UserID: 1, Online: true}, {UserID: 2, Online: true}}, p)

	s, err := alice.Settings(ctx)
	require.NoError(t, err)
	require.Equal(t, client.Settings{Notifications: true}, s)
	yes, no := true, false
	s, err = alice.SetSettings(ctx, client.SettingsChange{HidePresence: &yes})
	require.NoError(t, err)
	require.Equal(t, client.Settings{HidePresence: true, Notifications: true}, s)
	s, err = alice.SetSettings(ctx, client.SettingsChange{Notifications: &no})
	require.NoError(t, err)
	require.Equal(t, client.Settings{HidePresence: true}, s)
	s, err = alice.Settings(ctx)
	require.NoError(t, err)
	require.Equal(t, client.Settings{HidePresence: true}, s)
	waitFor(t, 30*time.Second, "alice offline for bob", func() bool {
		mu.Lock()
		defer mu.Unlock()
		last := presence[len(presence)-1]
		return last.UserID == 1 && !last.Online && last.LastSeen == nil
	})
	_, err = alice.SetSettings(ctx, client.SettingsChange{})
	var ae *client.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, 400, ae.Status)
}
