package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
)

// TestReportMessage: a member reports another's message through the
// client; the same report id again answers the same report; refusals are
// APIErrors the client does not retry.
func TestReportMessage(t *testing.T) {
	w := newWorld(t, nil, nil)
	ctx := context.Background()
	alice, bob := w.direct(t, 1), w.direct(t, 2)
	cid, err := alice.CreateConversation(ctx, "reports", 2)
	require.NoError(t, err)
	rb := start(t, bob, newApp())
	id, err := bob.SendWith(ctx, cid, "rude words", client.SendOptions{})
	require.NoError(t, err)
	sent, err := rb.c.WaitSent(ctx, id)
	require.NoError(t, err)
	seq := sent.Message.Seq

	res, err := alice.ReportMessage(ctx, cid, seq, client.ReportOptions{Reason: "harassment", Note: "not ok"})
	require.NoError(t, err)
	require.False(t, res.Pending)
	require.Equal(t, res.ReportID, res.Report.ReportID)
	require.Equal(t, "harassment", res.Report.Reason)
	require.Equal(t, seq, res.Report.Seq)
	again, err := alice.ReportMessage(ctx, cid, seq, client.ReportOptions{Reason: "harassment", Note: "not ok", ReportID: res.ReportID})
	require.NoError(t, err)
	require.Equal(t, res.Report, again.Report, "the same report id answers the same report")

	for _, c := range []struct {
		who    *client.Client
		seq    int64
		o      client.ReportOptions
		status int
	}{
		{alice, seq, client.ReportOptions{Reason: "boring"}, http.StatusBadRequest},
		{bob, seq, client.ReportOptions{Reason: "spam"}, http.StatusBadRequest}, // one's own
		{alice, seq + 100, client.ReportOptions{Reason: "spam"}, http.StatusNotFound},
		{w.direct(t, 3), seq, client.ReportOptions{Reason: "spam"}, http.StatusForbidden},
	} {
		_, err := c.who.ReportMessage(ctx, cid, c.seq, c.o)
		var ae *client.APIError
		require.True(t, errors.As(err, &ae), "%v: %v", c.o, err)
		require.Equal(t, c.status, ae.Status, "%v: %v", c.o, err)
	}
	_, err = alice.ReportMessage(ctx, cid, seq, client.ReportOptions{})
	require.Error(t, err, "a reason is needed")
}
