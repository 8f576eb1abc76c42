package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"unicode/utf8"

	"github.com/inboxd/inboxd/protocol"
)

// FuzzDecodeBody drives the request body decoder with every request type:
// it must never panic, every failure must be a client error of the error
// shape, and a success must have been one valid UTF-8 JSON object.
func FuzzDecodeBody(f *testing.F) {
	for _, seed := range []string{
		`{"msg_id":"0f8fad5b-d9cb-469f-a165-70867728950e","body":"hi"}`,
		`{"title":"t","members":[1,2,3]}`,
		`{"user_id":42}`, `{"pinned":true,"muted":false}`, `{"seq":7}`,
		`{"msg_id":`, `{"body":"x","extra":1}`, `{"body":5}`, "{\"body\":\"\xff\"}",
		``, `null`, `[]`, `{} {}`, `{"seq":1e400}`, `{"members":[1.5]}`, `{"seq":-1}`,
		`{"body":"\ud800"}`, " \t\n{}", `{"user_id":9223372036854775808}`,
	} {
		f.Add([]byte(seed))
	}
	targets := []func() any{
		func() any { return &protocol.SendMessage{} },
		func() any { return &protocol.CreateConversation{} },
		func() any { return &protocol.AddMember{} },
		func() any { return &protocol.SetRecord{} },
		func() any { return &protocol.MarkRead{} },
		func() any { return &protocol.DevTokenRequest{} },
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, newT := range targets {
			v := newT()
			err := decodeJSON(raw, v)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != protocol.CodeBadRequest || e.Message == "" {
					t.Fatalf("decode error is not a bad_request: %#v", err)
				}
				continue
			}
			if !utf8.Valid(raw) || !json.Valid(raw) {
				t.Fatalf("accepted invalid input %q", raw)
			}
			var obj map[string]json.RawMessage
			if json.Unmarshal(raw, &obj) != nil || obj == nil {
				t.Fatalf("accepted a non-object %q", raw)
			}
		}
	})
}

// FuzzQuery drives the query decoders (sync, list page tokens) with any
// query string: no panic, only bad_request errors, values within bounds.
func FuzzQuery(f *testing.F) {
	for _, seed := range []string{
		"after=1&limit=50&wait=30&epoch=1", "after=-1", "after=99999999999999999999", "limit=0",
		"wait=31", "after=1&after=2", "epoch=", "page=" + (pageToken{version: 3, byVersion: true}).String(),
		"page=bz4xLjEuMQ", "page=%ff", "since_version=1&page=x",
	} {
		f.Add(seed)
	}
	cfg := Config{AuthSecret: []byte("x")}
	cfg.setDefaults()
	g := &Gateway{cfg: cfg}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		r := &http.Request{URL: &url.URL{RawQuery: rawQuery}}
		p, wait, err := g.parseSyncQuery(r)
		if err == nil {
			if p.after < 0 || p.limit < 1 || p.limit > cfg.PageMax || wait < 0 || wait > cfg.LongPollMax || (p.hasEpoch && p.epoch < 0) {
				t.Fatalf("out of bounds: %+v wait %v", p, wait)
			}
		} else if e, ok := err.(*Error); !ok || e.Code != protocol.CodeBadRequest {
			t.Fatalf("not a bad_request: %v", err)
		}
		q, _ := url.ParseQuery(rawQuery)
		if page := q.Get("page"); page != "" {
			tok, err := parsePageToken(page)
			if err == nil {
				again, err := parsePageToken(tok.String())
				if err != nil || again.String() != tok.String() {
					t.Fatalf("page token %q does not round-trip", page)
				}
			}
		}
	})
}
