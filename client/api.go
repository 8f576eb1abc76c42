package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/protocol"
)

// api makes the HTTP requests of docs/protocol.md. Each method is one request:
// retries are the callers' business.
type api struct {
	base    *url.URL
	hc      *http.Client
	token   func(ctx context.Context) (string, error)
	refresh bool // token is a TokenSource: a 401 is retried once with a new token
	timeout time.Duration
}

// maxAnswerBytes bounds an answer body (a page of 200 entries with 4 KiB
// bodies, JSON-escaped, is far below).
const maxAnswerBytes = 64 << 20

func (a *api) url(path string, q url.Values) string {
	u := *a.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawPath = ""
	u.RawQuery = q.Encode()
	return u.String()
}

// do sends one request and decodes a 2xx answer into out. A non-2xx answer
// (but 304) is an *APIError. timeout 0 means the api's default.
func (a *api) do(ctx context.Context, method, path string, q url.Values, in any, hdr http.Header, out any, timeout time.Duration) (int, http.Header, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return 0, nil, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
	}
	if timeout == 0 {
		timeout = a.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tok, err := a.token(ctx)
	if err != nil {
		return 0, nil, fmt.Errorf("token for %s %s: %w", method, path, err)
	}
	status, h, err := a.once(ctx, method, path, q, body, hdr, out, tok)
	if status == http.StatusUnauthorized && a.refresh {
		// A token source may have a fresh token now; the same one would
		// only be refused again.
		if fresh, terr := a.token(ctx); terr == nil && fresh != tok {
			return a.once(ctx, method, path, q, body, hdr, out, fresh)
		}
	}
	return status, h, err
}

func (a *api) once(ctx context.Context, method, path string, q url.Values, body []byte, hdr http.Header, out any, tok string) (int, http.Header, error) {
	op := method + " " + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.url(path, q), rd)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", op, err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	res, err := a.hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", op, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxAnswerBytes))
	if err != nil {
		// A connection cut mid-answer: temporary, like any network error.
		return 0, nil, fmt.Errorf("%s: read answer (%d): %w", op, res.StatusCode, err)
	}
	switch {
	case res.StatusCode == http.StatusNotModified:
		return res.StatusCode, res.Header, nil
	case res.StatusCode >= 200 && res.StatusCode < 300:
		if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				// A truncated or garbled body is a network fault as far
				// as the client can tell: retry.
				return 0, nil, fmt.Errorf("%s: decode %d answer: %w", op, res.StatusCode, err)
			}
		}
		return res.StatusCode, res.Header, nil
	}
	now := time.Now()
	ae := &APIError{Op: op, Status: res.StatusCode, RetryAfter: parseRetryAfter(res.Header.Get("Retry-After"), now)}
	if ae.RetryAfter == 0 && res.StatusCode == http.StatusTooManyRequests {
		// Without Retry-After, the bucket's reset time says when to come back.
		if reset, err := strconv.ParseInt(res.Header.Get("X-RateLimit-Reset"), 10, 64); err == nil {
			if d := time.Unix(reset, 0).Sub(now); d > 0 {
				ae.RetryAfter = min(d, time.Hour)
			}
		}
	}
	var eb protocol.ErrorBody
	if json.Unmarshal(raw, &eb) == nil {
		ae.Code, ae.Message, ae.Retryable = eb.Error.Code, eb.Error.Message, eb.Error.Retryable
		ae.noteRetryAfterMS(eb.Error.RetryAfterMS)
	} else if len(raw) > 0 {
		ae.Message = strings.TrimSpace(string(raw[:min(len(raw), 200)]))
	}
	return res.StatusCode, res.Header, ae
}

// syncRequest is one GET /v1/sync.
type syncRequest struct {
	after    int64
	epoch    int64
	hasEpoch bool
	limit    int
	wait     time.Duration // whole seconds; 0 answers at once
	etag     string        // If-None-Match
}

// sync answers r; notModified is a 304 (nothing new, same etag).
func (a *api) sync(ctx context.Context, r syncRequest) (ans *protocol.SyncAnswer, etag string, notModified bool, err error) {
	q := url.Values{}
	q.Set("after", strconv.FormatInt(r.after, 10))
	if r.hasEpoch {
		q.Set("epoch", strconv.FormatInt(r.epoch, 10))
	}
	if r.limit > 0 {
		q.Set("limit", strconv.Itoa(r.limit))
	}
	var hdr http.Header
	timeout := time.Duration(0)
	if r.wait > 0 {
		q.Set("wait", strconv.FormatInt(int64(r.wait/time.Second), 10))
		timeout = r.wait + a.timeout // the hold plus a normal request
	}
	if r.etag != "" {
		hdr = http.Header{"If-None-Match": {r.etag}}
	}
	ans = &protocol.SyncAnswer{}
	status, h, err := a.do(ctx, http.MethodGet, "/v1/sync", q, nil, hdr, ans, timeout)
	if err != nil {
		return nil, "", false, err
	}
	if status == http.StatusNotModified {
		return nil, r.etag, true, nil
	}
	return ans, h.Get("ETag"), false, nil
}

// conversations reads one page of the conversation list.
func (a *api) conversations(ctx context.Context, page *string, limit int) (*protocol.ConversationList, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if page != nil {
		q.Set("page", *page)
	}
	var ans protocol.ConversationList
	if _, _, err := a.do(ctx, http.MethodGet, "/v1/conversations", q, nil, nil, &ans, 0); err != nil {
		return nil, err
	}
	return &ans, nil
}

// history reads messages of cid with seq < before (0: the newest).
func (a *api) history(ctx context.Context, cid, before int64, limit int) (*protocol.History, error) {
	q := url.Values{}
	if before > 0 {
		q.Set("before", strconv.FormatInt(before, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var ans protocol.History
	if _, _, err := a.do(ctx, http.MethodGet, "/v1/conversations/"+strconv.FormatInt(cid, 10)+"/messages", q, nil, nil, &ans, 0); err != nil {
		return nil, err
	}
	return &ans, nil
}

// historyAfter reads messages of cid with seq > after, ascending (has_more:
// newer ones exist).
func (a *api) historyAfter(ctx context.Context, cid, after int64, limit int) (*protocol.History, error) {
	return a.historyQuery(ctx, cid, "after", after, limit)
}

// historyChanged reads the messages of cid changed after change count
// changedAfter, in change order (changed_ord).
func (a *api) historyChanged(ctx context.Context, cid, changedAfter int64, limit int) (*protocol.History, error) {
	return a.historyQuery(ctx, cid, "changed_after", changedAfter, limit)
}

func (a *api) historyQuery(ctx context.Context, cid int64, key string, value int64, limit int) (*protocol.History, error) {
	q := url.Values{}
	q.Set(key, strconv.FormatInt(value, 10))
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var ans protocol.History
	if _, _, err := a.do(ctx, http.MethodGet, "/v1/conversations/"+strconv.FormatInt(cid, 10)+"/messages", q, nil, nil, &ans, 0); err != nil {
		return nil, err
	}
	return &ans, nil
}

// send posts a message. The answer is the message (201, or 200 for a msg_id
// already projected) or nil for 202 pending.
func (a *api) send(ctx context.Context, it OutboxItem, timeout time.Duration) (*Message, error) {
	var m Message
	status, _, err := a.do(ctx, http.MethodPost, "/v1/conversations/"+strconv.FormatInt(it.ConversationID, 10)+"/messages", nil,
		protocol.SendMessage{MsgID: it.MsgID, Body: it.Body, ReplyTo: it.ReplyTo,
			Mentions: it.Mentions, MentionAll: it.MentionAll, Attachments: it.Attachments}, nil, &m, timeout)
	if err != nil {
		return nil, err
	}
	if status == http.StatusAccepted || m.Seq == 0 {
		return nil, nil
	}
	return &m, nil
}

// DevToken asks a gateway in dev mode for a token of userID
// (POST /v1/dev/token). hc nil means http.DefaultClient.
func DevToken(ctx context.Context, hc *http.Client, baseURL string, userID int64) (string, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	base, err := parseBaseURL(baseURL)
	if err != nil {
		return "", err
	}
	a := &api{base: base, hc: hc, timeout: 30 * time.Second,
		token: func(context.Context) (string, error) { return "", nil }}
	var out protocol.DevToken
	if _, _, err := a.do(ctx, http.MethodPost, "/v1/dev/token", nil, protocol.DevTokenRequest{UserID: userID}, nil, &out, 0); err != nil {
		return "", err
	}
	if out.Token == "" {
		return "", errors.New("POST /v1/dev/token: answer without a token")
	}
	return out.Token, nil
}

func parseBaseURL(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("client: BaseURL %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: BaseURL %q must be http(s)://host[:port][/prefix]", s)
	}
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// wsURL is the WebSocket URL of base.
func wsURL(base *url.URL) string {
	u := *base
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/v1/ws"
	u.RawPath = ""
	return u.String()
}
