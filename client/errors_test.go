package client_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
	"github.com/inboxd/inboxd/gateway"
)

// TestPermanentErrors is acceptance 3: refusals that retrying cannot fix
// stop Run with a *PermanentError that says what happened, instead of
// retrying forever.
func TestPermanentErrors(t *testing.T) {
	noClientGoroutines(t)
	w := newWorld(t, nil, nil)
	var epoch int64
	require.NoError(t, w.env.UserPool(1).QueryRow(context.Background(), `SELECT epoch FROM meta`).Scan(&epoch)) // user 1's server

	cases := []struct {
		name      string
		transport client.Transport
		token     string
		faults    *faults
		state     *client.State
		status    int
		closeCode int
		code      string
	}{
		{name: "invalid token, websocket", token: "not-a-token", closeCode: client.CloseUnauthorized, code: client.CodeUnauthorized},
		{name: "invalid token, long-polling", transport: client.TransportPolling, token: "not-a-token",
			status: http.StatusUnauthorized, code: client.CodeUnauthorized},
		{name: "websocket closed with 4003", transport: client.TransportWebSocket,
			faults: &faults{WSCloseAfterWelcome: client.CloseNotAllowed}, closeCode: client.CloseNotAllowed},
		{name: "sync refused with 403", transport: client.TransportPolling,
			faults: &faults{ForceStatus: http.StatusForbidden, ForceCode: client.CodeNotMember, ForcePath: "/v1/sync"},
			status: http.StatusForbidden, code: client.CodeNotMember},
		{name: "cursor beyond the head: 400 from the gateway", transport: client.TransportPolling,
			state:  &client.State{Epoch: epoch, Cursor: 1_000_000},
			status: http.StatusBadRequest, code: client.CodeBadRequest},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := w.url
			if tc.faults != nil {
				p := newFaultProxy(t, w.url, uint64(i))
				p.set(*tc.faults)
				url = p.url
			}
			a := newApp()
			cfg := w.config(t, url, 1, a)
			cfg.Transport = tc.transport
			if tc.token != "" {
				cfg.Token = tc.token
			}
			if tc.state != nil {
				st := client.NewMemoryStore()
				require.NoError(t, st.Save(context.Background(), tc.state))
				cfg.Store = st
			}
			c, err := client.New(cfg)
			require.NoError(t, err)
			r := start(t, c, a)
			var runErr error
			select {
			case runErr = <-r.done:
				r.done <- runErr
			case <-time.After(30 * time.Second):
				t.Fatal("Run keeps retrying a permanent error")
			}
			var pe *client.PermanentError
			require.ErrorAs(t, runErr, &pe, "%v", runErr)
			require.True(t, client.IsPermanent(runErr))
			require.Equal(t, tc.status, pe.Status, "%v", pe)
			require.Equal(t, tc.closeCode, pe.CloseCode, "%v", pe)
			if tc.code != "" {
				require.Equal(t, tc.code, pe.Code, "%v", pe)
			}
			t.Logf("Run stopped with: %v", runErr)
		})
	}

	// A token source whose first token is refused, then a good one: the
	// client retries with the new token instead of stopping.
	t.Run("token source refreshes after a 401", func(t *testing.T) {
		_, err := w.direct(t, 2).CreateConversation(context.Background(), "refresh", 1)
		require.NoError(t, err)
		for _, tr := range []client.Transport{client.TransportWebSocket, client.TransportPolling} {
			a := newApp()
			cfg := w.config(t, w.url, 1, a)
			cfg.Transport = tr
			cfg.Token = ""
			var calls atomic.Int64
			good := w.token(t, 1)
			cfg.TokenSource = func(context.Context) (string, error) {
				if calls.Add(1) == 1 {
					return "expired", nil
				}
				return good, nil
			}
			c, err := client.New(cfg)
			require.NoError(t, err)
			r := start(t, c, a)
			converge(t, w, 1, r, nil)
			requireExactlyOnce(t, w, 1, a.snapshot())
			require.GreaterOrEqual(t, calls.Load(), int64(2))
			require.NoError(t, r.stop())
		}
	})
}

// TestSendRefusals: a send the server refuses for good (not a member,
// no such conversation, too large) ends with its error in SendResult; the
// client keeps running and the sends after it go through, over the
// WebSocket and over HTTP.
func TestSendRefusals(t *testing.T) {
	noClientGoroutines(t)
	w := newWorld(t, nil, nil)
	ctx := context.Background()
	bob := w.direct(t, 2)
	shared, err := bob.CreateConversation(ctx, "shared", 1)
	require.NoError(t, err)
	private, err := bob.CreateConversation(ctx, "bob only")
	require.NoError(t, err)
	for _, overHTTP := range []bool{false, true} {
		a := newApp()
		cfg := w.config(t, w.url, 1, a)
		cfg.Transport = client.TransportWebSocket
		cfg.SendOverHTTP = overHTTP
		c, err := client.New(cfg)
		require.NoError(t, err)
		r := start(t, c, a)
		converge(t, w, 1, r, nil) // the WebSocket is up: sends use it unless overHTTP

		notMember, err := c.Send(ctx, private, "let me in")
		require.NoError(t, err)
		noConv, err := c.Send(ctx, 987654, "anyone?")
		require.NoError(t, err)
		tooLarge, err := c.Send(ctx, shared, strings.Repeat("x", 5000))
		require.NoError(t, err)
		ok, err := c.Send(ctx, shared, "fine")
		require.NoError(t, err)
		_, err = c.Send(ctx, shared, "")
		require.Error(t, err, "an empty body is refused at once")
		_, err = c.Send(ctx, shared, "\xff\xfe")
		require.Error(t, err, "invalid UTF-8 is refused at once")

		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		for id, status := range map[string]int{notMember: 403, noConv: 404, tooLarge: 413} {
			res, err := c.WaitSent(wctx, id)
			require.NoError(t, err)
			var ae *client.APIError
			require.ErrorAs(t, res.Err, &ae, "send %s over HTTP=%v", id, overHTTP)
			require.Equal(t, status, ae.Status, "%v", ae)
			require.Nil(t, res.Message)
			n, _, _ := w.rowsOf(t, id)
			require.Zero(t, n)
		}
		res, err := c.WaitSent(wctx, ok)
		cancel()
		require.NoError(t, err)
		require.NoError(t, res.Err)
		requireSent(t, w, a, []string{ok})
		require.Empty(t, c.Outbox())
		_, ended := r.ended()
		require.False(t, ended)
		require.NoError(t, r.stop())
	}
}

// TestServerDownAndBack: temporary failures never stop the client. With the
// gateway unreachable, the client backs off, opens its circuit, queues
// sends; when the gateway is back, it catches up and sends each queued
// message once.
func TestServerDownAndBack(t *testing.T) {
	noClientGoroutines(t)
	w := newWorld(t, nil, nil)
	ctx := context.Background()
	bob := w.direct(t, 2)
	cid, err := bob.CreateConversation(ctx, "down", 1)
	require.NoError(t, err)
	p := newTCPProxy(t, w.url, 3)

	type dev struct {
		a   *app
		r   *running
		ids []string
	}
	var devs []*dev
	for _, tr := range []client.Transport{client.TransportAuto, client.TransportPolling} {
		a := newApp()
		cfg := w.config(t, p.url, 1, a)
		cfg.Transport = tr
		cfg.BreakerThreshold = 4
		c, err := client.New(cfg)
		require.NoError(t, err)
		d := &dev{a: a, r: start(t, c, a)}
		converge(t, w, 1, d.r, nil)
		devs = append(devs, d)
	}
	p.setDown(true)
	for _, d := range devs {
		for i := 0; i < 5; i++ {
			id, err := d.r.c.Send(ctx, cid, "while down")
			require.NoError(t, err)
			d.ids = append(d.ids, id)
		}
	}
	w.post(t, 2, cid, 20)
	for _, d := range devs {
		waitFor(t, 60*time.Second, "the circuit to open", func() bool {
			d.a.mu.Lock()
			defer d.a.mu.Unlock()
			for _, s := range d.a.statuses {
				if s.State == client.StateCircuitOpen {
					return true
				}
			}
			return false
		})
	}
	p.setDown(false)
	for _, d := range devs {
		waitSends(t, d.r, d.ids)
	}
	for _, d := range devs {
		converge(t, w, 1, d.r, nil)
		requireExactlyOnce(t, w, 1, d.a.snapshot())
		requireSent(t, w, d.a, d.ids)
		_, ended := d.r.ended()
		require.False(t, ended)
		require.NoError(t, d.r.stop())
	}
}

// TestPendingSends: with an ack wait too short for the projection, sends
// are answered 202 pending (HTTP) or unavailable (WebSocket); the client
// keeps asking with the same msg_id, or sees the message in its inbox,
// and every send ends with exactly one message.
func TestPendingSends(t *testing.T) {
	noClientGoroutines(t)
	w := newWorld(t, func(c *gateway.Config) { c.AckWait = time.Millisecond }, nil)
	ctx := context.Background()
	bob := w.direct(t, 2)
	cid, err := bob.CreateConversation(ctx, "slow acks", 1)
	require.NoError(t, err)
	// With this ack wait the creation answers before its projection, and
	// a send to a conversation not projected yet is refused with 404.
	w.env.WaitCaughtUp(t, 60*time.Second)
	for _, overHTTP := range []bool{true, false} {
		a := newApp()
		cfg := w.config(t, w.url, 1, a)
		cfg.Transport = client.TransportWebSocket
		cfg.SendOverHTTP = overHTTP
		c, err := client.New(cfg)
		require.NoError(t, err)
		r := start(t, c, a)
		var ids []string
		for i := 0; i < 4; i++ {
			id, err := c.Send(ctx, cid, "pending?")
			require.NoError(t, err)
			ids = append(ids, id)
		}
		converge(t, w, 1, r, ids)
		requireSent(t, w, a, ids)
		requireExactlyOnce(t, w, 1, a.snapshot())
		require.NoError(t, r.stop())
	}
}
