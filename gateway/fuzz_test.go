package gateway

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/inboxd/inboxd/protocol"
)

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
			if p.After < 0 || p.Limit < 1 || p.Limit > cfg.PageMax || wait < 0 || wait > cfg.LongPollMax || (p.HasEpoch && p.Epoch < 0) {
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
