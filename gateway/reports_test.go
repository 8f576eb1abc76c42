package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/apikey"
	"github.com/inboxd/inboxd/protocol"
	"github.com/inboxd/inboxd/replay"
)

func reportPath(cid, seq int64) string { return msgPath(cid, seq) + "/report" }

// report reports a message and decodes a 201.
func (u *user) report(t testing.TB, cid, seq int64, body map[string]any, want int, hdr ...string) protocol.Report {
	t.Helper()
	r := u.do(t, "POST", reportPath(cid, seq), body, hdr...)
	require.Equal(t, want, r.status, "%s", r)
	var a protocol.Report
	if want == http.StatusCreated {
		r.decode(t, &a)
	}
	return a
}

// reportsOf lists the queue with query (state, conversation_id, after, limit).
func reportsOf(t testing.TB, svc *user, query string) protocol.ServerReports {
	t.Helper()
	r := svc.do(t, "GET", "/v1/server/reports?"+query, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var page protocol.ServerReports
	r.decode(t, &page)
	return page
}

// TestReportsMessage: a member reports a message; the same report_id is
// the same report; the members see nothing of it; and what is refused is
// refused in the error shape.
func TestReportsMessage(t *testing.T) {
	tg := newGateway(t, nil)
	a, b, c, d := tg.user(t, 1), tg.user(t, 2), tg.user(t, 3), tg.user(t, 4)
	cid := a.create(t, "group", 2, 4)
	m := b.send(t, cid, "buy cheap pills")
	_, headA, _ := a.syncAll(t, 0, 50)
	_, headB, _ := b.syncAll(t, 0, 50)

	id := uuid.NewString()
	got := a.report(t, cid, m.Seq, map[string]any{"report_id": id, "reason": "spam", "note": "again"}, http.StatusCreated)
	require.Equal(t, id, got.ReportID)
	require.Equal(t, protocol.Report{ReportID: id, ConversationID: cid, Seq: m.Seq, Reason: "spam", Note: "again", CreatedAt: got.CreatedAt}, got)
	again := a.report(t, cid, m.Seq, map[string]any{"report_id": id, "reason": "spam", "note": "again"}, http.StatusCreated)
	require.Equal(t, got, again, "the same report_id is the same report")
	byHeader := uuid.NewString()
	h := a.report(t, cid, m.Seq, map[string]any{"reason": "harassment"}, http.StatusCreated, "Idempotency-Key", byHeader)
	require.Equal(t, byHeader, h.ReportID)

	// Invisible to the members: no entry, no change of the message.
	entries, head, _ := a.syncAll(t, headA, 50)
	require.Empty(t, entries)
	require.Equal(t, headA, head)
	entries, head, _ = b.syncAll(t, headB, 50)
	require.Empty(t, entries)
	require.Equal(t, headB, head)
	hist, _ := historyOf(t, b, cid, "")
	require.LessOrEqual(t, hist.Messages[len(hist.Messages)-1].Version, int64(1), "the message did not change")

	// A former member may report what it saw, not what came after it left.
	r := a.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/4", cid), nil)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	later := b.send(t, cid, "after 4 left")
	d.report(t, cid, m.Seq, map[string]any{"report_id": uuid.NewString(), "reason": "other"}, http.StatusCreated)

	long := strings.Repeat("x", 1001)
	cases := []struct {
		name   string
		u      *user
		cid    int64
		seq    int64
		body   map[string]any
		status int
		code   string
	}{
		{"outsider", c, cid, m.Seq, map[string]any{"report_id": uuid.NewString(), "reason": "spam"}, 403, protocol.CodeNotMember},
		{"removed before the message", d, cid, later.Seq, map[string]any{"report_id": uuid.NewString(), "reason": "spam"}, 404, protocol.CodeNotFound},
		{"unknown seq", a, cid, 999, map[string]any{"report_id": uuid.NewString(), "reason": "spam"}, 404, protocol.CodeNotFound},
		{"unknown conversation", a, 999999, 1, map[string]any{"report_id": uuid.NewString(), "reason": "spam"}, 404, protocol.CodeNotFound},
		{"system message", a, cid, 1, map[string]any{"report_id": uuid.NewString(), "reason": "spam"}, 400, protocol.CodeBadRequest},
		{"own message", b, cid, m.Seq, map[string]any{"report_id": uuid.NewString(), "reason": "spam"}, 400, protocol.CodeBadRequest},
		{"bad reason", a, cid, m.Seq, map[string]any{"report_id": uuid.NewString(), "reason": "boring"}, 400, protocol.CodeBadRequest},
		{"no reason", a, cid, m.Seq, map[string]any{"report_id": uuid.NewString()}, 400, protocol.CodeBadRequest},
		{"note too long", a, cid, m.Seq, map[string]any{"report_id": uuid.NewString(), "reason": "spam", "note": long}, 413, protocol.CodePayloadTooLarge},
		{"no report_id", a, cid, m.Seq, map[string]any{"reason": "spam"}, 400, protocol.CodeBadRequest},
		{"report_id not a uuid", a, cid, m.Seq, map[string]any{"report_id": "x", "reason": "spam"}, 400, protocol.CodeBadRequest},
		{"report_id of another report", a, cid, later.Seq, map[string]any{"report_id": id, "reason": "spam"}, 400, protocol.CodeBadRequest},
		{"report_id of another reporter", d, cid, m.Seq, map[string]any{"report_id": id, "reason": "spam"}, 400, protocol.CodeBadRequest},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			r := k.u.do(t, "POST", reportPath(k.cid, k.seq), k.body)
			require.Equal(t, k.status, r.status, "%s", r)
			require.Equal(t, k.code, errCode(t, r))
		})
	}
	var n int
	require.NoError(t, tg.env.ConvPool(cid).QueryRow(context.Background(), `SELECT count(*) FROM reports`).Scan(&n))
	require.Equal(t, 3, n, "one row per report, none for a refusal")
	tg.verify(t)
}

// TestReportsQueue: the server API lists the queue oldest first, by state
// and conversation, in pages; resolves a report once (the first
// resolution stands); shows the message's text until it is deleted; and
// a replay rebuilds the queue as it was.
func TestReportsQueue(t *testing.T) {
	tg := newGateway(t, serverTestConfig)
	svc, _ := tg.service(t, "moderation", apikey.ScopeReports)
	other, _ := tg.service(t, "other", apikey.ScopeRead)
	a, b := tg.user(t, 1), tg.user(t, 2)
	one := a.create(t, "one", 2)
	two := a.create(t, "two", 2)
	m1 := b.send(t, one, "first")
	m2 := b.send(t, two, "second")
	m3 := b.send(t, one, "third")
	var ids []string
	for i, m := range []protocol.Message{m1, m2, m3} {
		rp := a.report(t, m.ConversationID, m.Seq, map[string]any{"report_id": uuid.NewString(), "reason": "hate", "note": fmt.Sprint("n", i)}, http.StatusCreated)
		ids = append(ids, rp.ReportID)
	}

	page := reportsOf(t, svc, "")
	require.Len(t, page.Reports, 3)
	require.Empty(t, page.Next)
	for i, rp := range page.Reports {
		require.Equal(t, ids[i], rp.ReportID, "oldest first")
		require.Equal(t, protocol.ReportOpen, rp.State)
		require.Equal(t, int64(2), rp.SenderID)
		require.Equal(t, int64(1), rp.ReporterID)
		require.Equal(t, "hate", rp.Reason)
		require.NotNil(t, rp.Body)
	}
	require.Equal(t, "first", *page.Reports[0].Body)
	require.Equal(t, m1.MsgID, page.Reports[0].MsgID)

	// Pages of one, by the cursor.
	var paged []string
	for after := ""; ; {
		p := reportsOf(t, svc, "limit=1&after="+after)
		for _, rp := range p.Reports {
			paged = append(paged, rp.ReportID)
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	require.Equal(t, ids, paged)
	of := reportsOf(t, svc, fmt.Sprintf("conversation_id=%d", one))
	require.Len(t, of.Reports, 2)
	require.Equal(t, []string{ids[0], ids[2]}, []string{of.Reports[0].ReportID, of.Reports[1].ReportID})

	// Resolve: once; a second resolution changes nothing.
	path := "/v1/server/reports/" + ids[0] + "/resolve"
	r := svc.do(t, "POST", path, protocol.ResolveReport{Resolution: "dismissed", Note: "fine"}, idem("r1")...)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var res protocol.ServerReport
	r.decode(t, &res)
	require.Equal(t, protocol.ReportResolved, res.State)
	require.Equal(t, "dismissed", res.Resolution)
	require.Equal(t, "fine", res.ResolutionNote)
	require.True(t, strings.HasSuffix(res.ResolvedBy, ":moderation"), res.ResolvedBy)
	require.NotNil(t, res.ResolvedAt)
	r = svc.do(t, "POST", path, protocol.ResolveReport{Resolution: "dismissed", Note: "fine"}, idem("r1")...)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var same protocol.ServerReport
	r.decode(t, &same)
	require.Equal(t, res, same, "the same call answers the same")
	r = svc.do(t, "POST", path, protocol.ResolveReport{Resolution: "actioned"}, idem("r2")...)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	r.decode(t, &same)
	require.Equal(t, res, same, "the first resolution stands")
	require.Equal(t, []string{ids[1], ids[2]}, []string{reportsOf(t, svc, "").Reports[0].ReportID, reportsOf(t, svc, "").Reports[1].ReportID})
	resolved := reportsOf(t, svc, "state=resolved")
	require.Len(t, resolved.Reports, 1)
	require.Equal(t, res, resolved.Reports[0])

	// The sender deletes its message: the queue keeps the report, not the text.
	r = b.do(t, "DELETE", msgPath(two, m2.Seq), map[string]any{"change_id": uuid.NewString()})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	gone := reportsOf(t, svc, fmt.Sprintf("conversation_id=%d", two)).Reports[0]
	require.Nil(t, gone.Body)
	require.True(t, gone.Deleted)

	// Refusals.
	for _, c := range []struct {
		name, method, path string
		body               any
		hdr                []string
		u                  *user
		status             int
	}{
		{"no scope", "GET", "/v1/server/reports", nil, nil, other, 403},
		{"bad state", "GET", "/v1/server/reports?state=closed", nil, nil, svc, 400},
		{"bad cursor", "GET", "/v1/server/reports?after=yesterday", nil, nil, svc, 400},
		{"bad limit", "GET", "/v1/server/reports?limit=0", nil, nil, svc, 400},
		{"unknown report", "POST", "/v1/server/reports/" + uuid.NewString() + "/resolve", protocol.ResolveReport{Resolution: "dismissed"}, idem("x"), svc, 404},
		{"not a report id", "POST", "/v1/server/reports/abc/resolve", protocol.ResolveReport{Resolution: "dismissed"}, idem("x"), svc, 404},
		{"bad resolution", "POST", "/v1/server/reports/" + ids[1] + "/resolve", protocol.ResolveReport{Resolution: "ignored"}, idem("x"), svc, 400},
		{"no idempotency key", "POST", "/v1/server/reports/" + ids[1] + "/resolve", protocol.ResolveReport{Resolution: "dismissed"}, nil, svc, 400},
		{"resolve without scope", "POST", "/v1/server/reports/" + ids[1] + "/resolve", protocol.ResolveReport{Resolution: "dismissed"}, idem("x"), other, 403},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.u.do(t, c.method, c.path, c.body, c.hdr...)
			require.Equal(t, c.status, r.status, "%s", r)
			errCode(t, r)
		})
	}
	require.Len(t, reportsOf(t, svc, "").Reports, 2, "nothing changed")

	// A replay rebuilds the queue from the log: the reports and the resolution.
	before := append(reportsOf(t, svc, "").Reports, reportsOf(t, svc, "state=resolved").Reports...)
	tg.stopFanout()
	_, err := tg.env.Replay(context.Background(), replay.Config{Brokers: tg.env.Brokers, Topic: tg.env.Topic,
		Logger: tg.env.Logger, Progress: &bytes.Buffer{}})
	require.NoError(t, err)
	after := append(reportsOf(t, svc, "").Reports, reportsOf(t, svc, "state=resolved").Reports...)
	require.Equal(t, before, after)
	tg.verify(t)
}
