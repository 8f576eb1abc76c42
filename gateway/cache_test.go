package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// TestHeadCacheAnswers304sAndFollowsCommits: a client at its head gets its
// 304s from the head cache (no query), and a commit moves the cached head
// so that the same request then answers the new entry.
func TestHeadCacheAnswers304sAndFollowsCommits(t *testing.T) {
	tg := newGateway(t, nil)
	a, b := tg.user(t, 1), tg.user(t, 2)
	cid := a.create(t, "heads", 2)
	_, head, _ := b.syncAll(t, 0, 50) // teaches the cache b's head
	s := b.sync(t, "after="+strconv.FormatInt(head, 10))
	etag := fmt.Sprintf(`"%d.%d"`, s.Epoch, head)
	q := "/v1/sync?after=" + strconv.FormatInt(head, 10)

	hits := counterValue(tg.g.metrics.headHit)
	for range 5 {
		r := b.do(t, "GET", q, nil, "If-None-Match", etag)
		require.Equal(t, http.StatusNotModified, r.status, "%s", r)
		require.Equal(t, etag, r.header.Get("ETag"))
	}
	require.Equal(t, hits+5, counterValue(tg.g.metrics.headHit), "the 304s came from the cache")

	m := a.send(t, cid, "moves the head")
	r := b.do(t, "GET", q, nil, "If-None-Match", etag)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	r.decode(t, &s)
	require.Len(t, s.Entries, 1)
	require.Equal(t, m.MsgID, s.Entries[0].Message.MsgID)
	require.Equal(t, fmt.Sprintf(`"%d.%d"`, s.Epoch, head+1), r.header.Get("ETag"))

	// A stale epoch is never answered from the cache.
	r = b.do(t, "GET", fmt.Sprintf("/v1/sync?after=%d&epoch=%d", head+1, s.Epoch-1), nil,
		"If-None-Match", fmt.Sprintf(`"%d.%d"`, s.Epoch, head+1))
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Contains(t, string(r.body), `"too_long":true`)
}

// TestHeadCacheForgetsWhileDeaf: while the LISTEN connection is down,
// notifications are lost, so the cache must not answer: a message committed
// meanwhile is served to a client presenting the old ETag.
func TestHeadCacheForgetsWhileDeaf(t *testing.T) {
	tg, deafen, hear := deafGateway(t)
	a, b := tg.user(t, 1), tg.user(t, 2)
	cid := a.create(t, "deaf", 2)
	_, head, _ := b.syncAll(t, 0, 50)
	s := b.sync(t, "after="+strconv.FormatInt(head, 10))
	etag := fmt.Sprintf(`"%d.%d"`, s.Epoch, head)
	q := "/v1/sync?after=" + strconv.FormatInt(head, 10)
	hits := counterValue(tg.g.metrics.headHit)
	r := b.do(t, "GET", q, nil, "If-None-Match", etag)
	require.Equal(t, http.StatusNotModified, r.status)
	require.Equal(t, hits+1, counterValue(tg.g.metrics.headHit))

	deafen()
	r = a.do(t, "POST", "/v1/conversations/"+strconv.FormatInt(cid, 10)+"/messages",
		`{"msg_id":"0b8e2a52-7f0e-4a57-9d8e-3c1f2f7a0001","body":"while deaf"}`)
	require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, r.status, "%s", r)
	tg.env.WaitCaughtUp(t, 30*time.Second)

	r = b.do(t, "GET", q, nil, "If-None-Match", etag)
	require.Equal(t, http.StatusOK, r.status, "no 304 from a cache that may have missed a commit: %s", r)
	r.decode(t, &s)
	require.Len(t, s.Entries, 1)
	require.Equal(t, hits+1, counterValue(tg.g.metrics.headHit), "no hit while deaf")
	hear()
}

// TestCachedPagesAreTheSame: a page served from the message cache is the
// same bytes as the first one, which read PostgreSQL, and its messages are
// what encoding/json makes of them.
func TestCachedPagesAreTheSame(t *testing.T) {
	tg := newGateway(t, nil)
	a, b := tg.user(t, 1), tg.user(t, 2)
	cid := a.create(t, "cache <&> \u2028", 2)
	for i := range 5 {
		a.send(t, cid, fmt.Sprintf("m%d <b>&amp;</b> \"quoted\" \u00e9\u2028", i))
	}
	first := b.do(t, "GET", "/v1/sync?after=0", nil)
	require.Equal(t, http.StatusOK, first.status)
	hits := counterValue(tg.g.metrics.cache.WithLabelValues("messages", "hit"))
	second := b.do(t, "GET", "/v1/sync?after=0", nil)
	require.Equal(t, string(first.body), string(second.body))
	require.Greater(t, counterValue(tg.g.metrics.cache.WithLabelValues("messages", "hit")), hits)
	require.True(t, json.Valid(second.body))

	var s struct {
		Entries []struct {
			Kind    string          `json:"kind"`
			Message json.RawMessage `json:"message"`
			Record  json.RawMessage `json:"record"`
		} `json:"entries"`
	}
	require.NoError(t, json.Unmarshal(second.body, &s))
	require.Len(t, s.Entries, 7) // creation, record, 5 messages
	for _, e := range s.Entries {
		raw := e.Message
		if e.Kind == protocol.KindRecord {
			raw = e.Record
		}
		require.NotEmpty(t, raw, "kind %s", e.Kind)
		var m protocol.Message
		if e.Kind == protocol.KindMessage {
			require.NoError(t, json.Unmarshal(raw, &m))
			want, err := protocol.Marshal(&m)
			require.NoError(t, err)
			require.Equal(t, string(want), string(raw))
		}
	}
}

// TestTokenCache: a remembered token still expires, and only the exact
// token that was verified is remembered.
func TestTokenCache(t *testing.T) {
	tg := newGateway(t, nil)
	tok, err := IssueToken(testSecret, 3, 1500*time.Millisecond)
	require.NoError(t, err)
	u := &user{tg: tg, id: 3, token: tok}
	hits := counterValue(tg.g.metrics.cache.WithLabelValues("tokens", "hit"))
	require.Equal(t, http.StatusOK, u.do(t, "GET", "/v1/sync", nil).status)
	require.Equal(t, http.StatusOK, u.do(t, "GET", "/v1/sync", nil).status)
	require.Equal(t, hits+1, counterValue(tg.g.metrics.cache.WithLabelValues("tokens", "hit")))

	forged := &user{tg: tg, id: 3, token: tok[:len(tok)-2] + "AA"}
	if forged.token == tok {
		forged.token = tok[:len(tok)-2] + "BB"
	}
	require.Equal(t, http.StatusUnauthorized, forged.do(t, "GET", "/v1/sync", nil).status)

	time.Sleep(time.Until(time.Now().Add(1600 * time.Millisecond)))
	r := u.do(t, "GET", "/v1/sync", nil)
	require.Equal(t, http.StatusUnauthorized, r.status, "%s", r)
	require.Contains(t, string(r.body), "token expired")
}

// TestSendAnsweredFromTheNotification: the 201 of a send is built from the
// notification of its projection (no read), goes into the message cache,
// and is the same JSON as the message every later read returns.
func TestSendAnsweredFromTheNotification(t *testing.T) {
	tg := newGateway(t, nil)
	a, b := tg.user(t, 1), tg.user(t, 2)
	cid := a.create(t, "acks", 2)
	_, head, _ := b.syncAll(t, 0, 50) // teaches the epoch
	tg.teachEpochs(t)
	before := tg.g.inbox.CachedMessages()
	r := a.do(t, "POST", "/v1/conversations/"+strconv.FormatInt(cid, 10)+"/messages",
		`{"msg_id":"0b8e2a52-7f0e-4a57-9d8e-3c1f2f7a00a1","body":"caf\u00e9 <ok> \"q\""}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	require.Equal(t, before+1, tg.g.inbox.CachedMessages(), "the answer went into the cache")
	hits := counterValue(tg.g.metrics.cache.WithLabelValues("messages", "hit"))

	p := b.do(t, "GET", "/v1/sync?after="+strconv.FormatInt(head, 10), nil)
	require.Equal(t, http.StatusOK, p.status)
	var s struct {
		Entries []struct {
			Message json.RawMessage `json:"message"`
		} `json:"entries"`
	}
	require.NoError(t, json.Unmarshal(p.body, &s))
	require.Len(t, s.Entries, 1)
	require.Equal(t, string(bytes.TrimSpace(r.body)), string(s.Entries[0].Message))
	require.Equal(t, hits+1, counterValue(tg.g.metrics.cache.WithLabelValues("messages", "hit")))

	// And as PostgreSQL has it, read around the cache.
	h := b.do(t, "GET", "/v1/conversations/"+strconv.FormatInt(cid, 10)+"/messages", nil)
	var hist struct {
		Messages []json.RawMessage `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(h.body, &hist))
	require.Equal(t, string(s.Entries[0].Message), string(hist.Messages[len(hist.Messages)-1]))

	// A retry of the same msg_id answers 200 with the original.
	r2 := a.do(t, "POST", "/v1/conversations/"+strconv.FormatInt(cid, 10)+"/messages",
		`{"msg_id":"0b8e2a52-7f0e-4a57-9d8e-3c1f2f7a00a1","body":"caf\u00e9 <ok> \"q\""}`)
	require.Equal(t, http.StatusOK, r2.status, "%s", r2)
	require.Equal(t, string(r.body), string(r2.body))
}
