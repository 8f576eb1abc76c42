package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
)

// TestRevokedTokenStopsTheClient: a running client whose user's tokens
// are revoked (the server API's revocations, stored where every gateway
// reads them) stops with a permanent error on either transport, as for
// any refused token, instead of retrying.
func TestRevokedTokenStopsTheClient(t *testing.T) {
	for _, tr := range []client.Transport{client.TransportWebSocket, client.TransportPolling} {
		t.Run(tr.String(), func(t *testing.T) {
			noClientGoroutines(t)
			w := newWorld(t, nil, nil)
			a := newApp()
			cfg := w.config(t, w.url, 5, a)
			cfg.Transport = tr
			c, err := client.New(cfg)
			require.NoError(t, err)
			_, err = c.CreateConversation(context.Background(), "soon revoked")
			require.NoError(t, err)
			r := start(t, c, a)
			converge(t, w, 5, r, nil)

			_, err = w.env.Pool.Exec(context.Background(),
				`INSERT INTO revocations (user_id, issued_before) VALUES (5, now() + interval '1 second')`)
			require.NoError(t, err)
			waitFor(t, 30*time.Second, "Run ended after the revocation", func() bool {
				_, ended := r.ended()
				return ended
			})
			runErr, _ := r.ended()
			var pe *client.PermanentError
			require.True(t, errors.As(runErr, &pe), "a permanent error: %v", runErr)
			require.Contains(t, runErr.Error(), "revoked")
		})
	}
}
