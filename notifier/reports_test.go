package notifier_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/notifier"
)

// reportsTaken returns the report bodies the receiver took, each id once.
func (r *receiver) reportsTaken(t *testing.T) []notifier.ReportWebhook {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	var out []notifier.ReportWebhook
	for _, raw := range r.raws {
		var w notifier.ReportWebhook
		require.NoError(t, json.Unmarshal(raw, &w))
		if w.Type == notifier.TypeReport && !seen[w.ID] {
			seen[w.ID] = true
			out = append(out, w)
		}
	}
	return out
}

// reportCalls counts the calls of type report.
func (r *receiver) reportCalls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.Type == notifier.TypeReport {
			n++
		}
	}
	return n
}

// TestReportNotified: a report reaches the webhook once, as a
// message.reported body, even when its reporter is connected and when it
// is reported again with the same report id; a notifier restarted after
// it does not post it again, and posts the next one once. Messages'
// notifications say their type.
func TestReportNotified(t *testing.T) {
	w := newWorld(t)
	cid := w.create(t, 1, 2)
	w.connect(t, 1) // a report is for the moderators: never skipped
	start := func() (stop func()) {
		cfg := w.config()
		cfg.Reports = true
		n, err := notifier.New(cfg, w.env.Pool)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		waitFor(t, 30*time.Second, "the notifier's consumer", n.Ready)
		return func() { cancel(); require.NoError(t, <-done) }
	}
	if w.env.Sharded() {
		t.Skip("one notifier in this test")
	}
	stop := start()
	seq := w.send(t, 2, cid, "rude")
	report := func(id string) {
		w.call(t, 1, "POST", fmt.Sprintf("/v1/conversations/%d/messages/%d/report", cid, seq),
			map[string]any{"report_id": id, "reason": "harassment", "note": "not ok"}, nil)
	}
	first := uuid.NewString()
	report(first)
	report(first)
	waitFor(t, 30*time.Second, "the report's webhook", func() bool { return len(w.rcv.reportsTaken(t)) == 1 })
	got := w.rcv.reportsTaken(t)[0]
	require.Equal(t, notifier.ReportWebhook{Type: notifier.TypeReport, ID: first, ConversationID: cid, Seq: seq, MsgID: got.MsgID,
		SenderID: 2, ReporterID: 1, Reason: "harassment", Note: "not ok", CreatedAt: got.CreatedAt}, got)
	require.NotEmpty(t, got.MsgID)

	stop()
	stop = start()
	defer stop()
	second := uuid.NewString()
	report(second)
	waitFor(t, 30*time.Second, "the second report's webhook", func() bool { return len(w.rcv.reportsTaken(t)) == 2 })
	time.Sleep(time.Second) // a repeat would come by now
	require.Len(t, w.rcv.reportsTaken(t), 2)
	require.Equal(t, 2, w.rcv.reportCalls(), "each report posted once")
	require.Zero(t, w.rcv.bad)
	w.rcv.mu.Lock()
	defer w.rcv.mu.Unlock()
	for _, c := range w.rcv.calls {
		require.Contains(t, []string{notifier.TypeMessage, notifier.TypeReport}, c.Type)
	}
}

// TestReportsOffByDefault: without Config.Reports a report posts nothing,
// while the messages after it are notified as ever.
func TestReportsOffByDefault(t *testing.T) {
	w := newWorld(t)
	cid := w.create(t, 1, 2)
	w.run(t, nil)
	seq := w.send(t, 2, cid, "rude")
	w.call(t, 1, "POST", fmt.Sprintf("/v1/conversations/%d/messages/%d/report", cid, seq),
		map[string]any{"report_id": uuid.NewString(), "reason": "spam"}, nil)
	w.send(t, 2, cid, "after the report")
	waitFor(t, 30*time.Second, "the messages' notification", func() bool {
		w.rcv.mu.Lock()
		defer w.rcv.mu.Unlock()
		return len(w.rcv.calls) > 0
	})
	time.Sleep(time.Second) // a report would come by now: it is due at once
	require.Zero(t, w.rcv.reportCalls())
}
