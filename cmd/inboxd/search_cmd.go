package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/client"
	"github.com/inboxd/inboxd/internal/config"
)

// runSearch is inboxd search QUERY: full-text search of your messages
// (client.Search; docs/protocol.md, "GET /v1/search"), one line per
// result with its snippet's matches marked.
func runSearch(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("search", flag.ContinueOnError)
	var f clientFlags
	f.bind(fs)
	var q client.SearchQuery
	var sender int64
	var after, before, order string
	var all bool
	prefix := true
	fs.Int64Var(&q.ConversationID, "conversation", 0, "only this conversation (0: all of yours)")
	fs.Int64Var(&sender, "sender", -1, "only this user's messages (-1: anyone's)")
	fs.StringVar(&after, "after", "", "only messages sent after this time: RFC 3339 (2026-12-01T09:00:00Z) or a date (2026-12-01, local midnight)")
	fs.StringVar(&before, "before", "", "only messages sent before this time, as --after")
	fs.BoolFunc("has-attachment", "only messages with attachments (=false: only those without; absent: either)", func(s string) error {
		v, err := strconv.ParseBool(s)
		q.HasAttachment = &v
		return err
	})
	fs.BoolVar(&q.MentionsMe, "mentions-me", false, "only messages that mention you (by id or @all)")
	fs.StringVar(&order, "order", "newest", "newest (newest first) or relevance (best match first)")
	fs.IntVar(&q.Limit, "limit", 20, "results per page, 1..100")
	fs.BoolVar(&all, "all", false, "print every page, not only the first")
	fs.BoolVar(&prefix, "prefix", true, "the last word is a prefix (hel finds hello); =false: whole words only")
	fs.Usage = config.Usage(fs, `inboxd search QUERY [--conversation N] [--sender N] [--after T] [--before T] [--has-attachment] [--mentions-me] [--order newest|relevance] [--limit N] [--all]: find messages you can see by their words ("quoted phrases" in order, the last word a prefix), one line per result with the matches marked`)
	words, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	q.Q = strings.Join(words, " ")
	if strings.TrimSpace(q.Q) == "" {
		return errors.New("give the words to search for")
	}
	q.NoPrefix = !prefix
	if sender >= 0 {
		q.SenderID = &sender
	}
	for _, t := range []struct {
		name, in string
		out      *time.Time
	}{{"after", after, &q.After}, {"before", before, &q.Before}} {
		if t.in == "" {
			continue
		}
		if *t.out, err = parseSearchTime(t.in); err != nil {
			return fmt.Errorf("--%s: %w", t.name, err)
		}
	}
	switch order {
	case "newest", "relevance":
		q.Order = client.SearchOrder(order)
	default:
		return fmt.Errorf("--order must be newest or relevance, not %q", order)
	}
	if q.Limit < 1 || q.Limit > 100 {
		return fmt.Errorf("--limit must be 1..100, not %d", q.Limit)
	}
	c, _, err := f.client()
	if err != nil {
		return err
	}
	mark := bracket
	if !f.jsonOut && boldOK(os.Stdout) {
		mark = bold
	}
	for page, err := range c.SearchPages(ctx, q) {
		if err != nil {
			return err
		}
		for _, r := range page.Results {
			if f.jsonOut {
				err = printJSON(os.Stdout, r)
			} else {
				_, err = fmt.Println(searchLine(r, mark))
			}
			if err != nil {
				return err
			}
		}
		if !all {
			if page.NextCursor != "" && !f.jsonOut {
				more := "-- more results: --all prints them"
				if n := page.EstimatedTotal; n != nil && *n >= 1000 {
					more += fmt.Sprintf(" (%d found or more)", *n)
				} else if n != nil {
					more += fmt.Sprintf(" (%d found)", *n)
				}
				fmt.Println(more)
			}
			return nil
		}
	}
	return nil
}

// parseInterspersed parses fs's flags wherever they stand among args and
// returns the other arguments, in order ("--" ends the flags).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var words []string
	for {
		if err := config.Parse(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return words, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(words, rest...), nil
		}
		words = append(words, rest[0])
		args = rest[1:]
	}
}

// parseSearchTime reads an RFC 3339 time or a date (local midnight).
func parseSearchTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	t, err := time.ParseInLocation(time.DateOnly, s, time.Local)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a date (2006-01-02)", s)
	}
	return t, nil
}

// searchLine is one result: when, where, who and the snippet, its matches
// passed through mark, on one line.
func searchLine(r client.SearchResult, mark func(string) string) string {
	m := r.Message
	oneLine := strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ", "\t", " ")
	parts := make([]client.SnippetPart, len(r.Snippet))
	for i, p := range r.Snippet {
		parts[i] = client.SnippetPart{Text: oneLine.Replace(p.Text), Match: p.Match}
	}
	who := "user " + strconv.FormatInt(m.SenderID, 10)
	if m.SenderName != "" {
		who = m.SenderName
	}
	return fmt.Sprintf("%s conv %d #%d  %s: %s", m.CreatedAt.Local().Format("2006-01-02 15:04:05"),
		m.ConversationID, m.Seq, who, client.SnippetText(parts, mark))
}

func bracket(s string) string { return "[" + s + "]" }

func bold(s string) string { return "\x1b[1m" + s + "\x1b[0m" }

// boldOK says whether w is a terminal that may be sent bold: not with
// NO_COLOR set (no-color.org) or TERM=dumb.
func boldOK(w io.Writer) bool {
	if os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
