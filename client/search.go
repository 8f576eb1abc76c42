package client

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/protocol"
)

// SearchResult is one message a search found, with a snippet of its body
// and its rank (protocol.SearchResult).
type SearchResult = protocol.SearchResult

// SnippetPart is a segment of a result's snippet (protocol.SnippetPart):
// plain text, never markup; Match marks the words the query matched.
type SnippetPart = protocol.SnippetPart

// SearchOrder is the order of a search's results.
type SearchOrder string

const (
	// SearchNewest orders by the time a message was sent, newest first
	// (the default).
	SearchNewest SearchOrder = "newest"
	// SearchRelevance orders by rank, highest first; ties newest first.
	SearchRelevance SearchOrder = "relevance"
)

// SearchQuery is a search (docs/protocol.md, "GET /v1/search"). Only Q is
// required; every other field left at its zero value is no filter.
type SearchQuery struct {
	// Q is what to find (1..256 bytes): words, "quoted phrases" whose words
	// follow each other; every term must match. The last word is a prefix
	// ("hel" finds "hello") unless Q ends with a space or a quote, or
	// NoPrefix is set.
	Q        string
	NoPrefix bool
	// ConversationID: only this conversation (0: all of the user's).
	ConversationID int64
	// SenderID: only this sender's messages (nil: anyone's; 0 is the
	// named system sender of the server API).
	SenderID *int64
	// After, Before: messages sent strictly after / before (zero: no
	// bound).
	After, Before time.Time
	// AfterSeq, BeforeSeq: seqs strictly above / below, with
	// ConversationID only (the server refuses them without).
	AfterSeq, BeforeSeq *int64
	// HasAttachment: true only messages with attachments, false only
	// messages without (nil: both).
	HasAttachment *bool
	// MentionsMe: only messages that mention the user (by id or @all).
	MentionsMe bool
	// Order: SearchNewest ("" too) or SearchRelevance.
	Order SearchOrder
	// Limit is the page's size, 1..100 (0: the server's 20).
	Limit int
	// Cursor is a SearchPage's NextCursor, for the page after it ("": the
	// first page). The other fields must be those of that page's query.
	Cursor string
}

// values is q as the query of GET /v1/search.
func (q SearchQuery) values() url.Values {
	v := url.Values{"q": {q.Q}}
	if q.NoPrefix {
		v.Set("prefix", "false")
	}
	if q.ConversationID != 0 {
		v.Set("conversation_id", strconv.FormatInt(q.ConversationID, 10))
	}
	if q.SenderID != nil {
		v.Set("sender_id", strconv.FormatInt(*q.SenderID, 10))
	}
	if !q.After.IsZero() {
		v.Set("after", q.After.Format(time.RFC3339Nano))
	}
	if !q.Before.IsZero() {
		v.Set("before", q.Before.Format(time.RFC3339Nano))
	}
	if q.AfterSeq != nil {
		v.Set("after_seq", strconv.FormatInt(*q.AfterSeq, 10))
	}
	if q.BeforeSeq != nil {
		v.Set("before_seq", strconv.FormatInt(*q.BeforeSeq, 10))
	}
	if q.HasAttachment != nil {
		v.Set("has_attachment", strconv.FormatBool(*q.HasAttachment))
	}
	if q.MentionsMe {
		v.Set("mentions_me", "true")
	}
	if q.Order != "" {
		v.Set("order", string(q.Order))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	return v
}

// SearchPage is a page of a search's results.
type SearchPage struct {
	Results []SearchResult
	// NextCursor is set when more results may follow: the Cursor of the
	// next page's query.
	NextCursor string
	// EstimatedTotal is, on the first page only (no Cursor), how many
	// messages matched when that page was read; nil on the pages after.
	EstimatedTotal *int64
}

// Search finds messages the user may see (those a history read would
// show it, in every conversation it is or was a member of), minus deleted
// and system messages and the messages of the senders it blocks (the
// server leaves those out, whatever Config.ShowBlocked), by their
// current text. It reads one page; SearchPages reads them all. Bad
// parameters are an *APIError with Status 400, a search that ran too long
// a Temporary one (503). It does not need Run.
func (c *Client) Search(ctx context.Context, q SearchQuery) (*SearchPage, error) {
	if strings.TrimSpace(q.Q) == "" {
		return nil, errors.New("client: a search needs a word")
	}
	var out protocol.SearchResults
	if _, _, err := c.api.do(ctx, http.MethodGet, "/v1/search", q.values(), nil, nil, &out, 0); err != nil {
		return nil, err
	}
	if out.Results == nil {
		out.Results = []SearchResult{}
	}
	return &SearchPage{Results: out.Results, NextCursor: out.NextCursor, EstimatedTotal: out.EstimatedTotal}, nil
}

// SearchPages reads the pages of q one after the other, from q.Cursor,
// until the last one or the first error (yielded with a nil page, after
// which the sequence ends). Pages are keyset pages: a message that arrives
// meanwhile does not shift them, so no result comes twice or is skipped.
//
//	for page, err := range c.SearchPages(ctx, client.SearchQuery{Q: "lunch"}) {
//		if err != nil { … }
//		for _, r := range page.Results { … }
//	}
func (c *Client) SearchPages(ctx context.Context, q SearchQuery) iter.Seq2[*SearchPage, error] {
	return func(yield func(*SearchPage, error) bool) {
		for {
			page, err := c.Search(ctx, q)
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(page, nil) || page.NextCursor == "" {
				return
			}
			q.Cursor = page.NextCursor
		}
	}
}

// SnippetText is a snippet as text, each matched segment passed through
// mark (nil: left as it is), such as
// func(s string) string { return "[" + s + "]" }. The text is the
// message's, line breaks included.
func SnippetText(parts []SnippetPart, mark func(string) string) string {
	var b strings.Builder
	for _, p := range parts {
		if p.Match && mark != nil {
			b.WriteString(mark(p.Text))
		} else {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}
