package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
)

// TestSearchCommand runs search against `inboxd dev`: one line per result
// with the matches in [brackets] (stdout is no terminal), words, a phrase,
// a prefix, filters given before or after the words, the first page with
// its hint and --all with every page once, the JSON form, a bad flag, and
// a blocked sender's messages gone.
func TestSearchCommand(t *testing.T) {
	d := newDevInstance(t)
	d.start(t)
	require.NoError(t, d.proc.WaitOutput("partitions assigned", time.Minute))
	work := t.TempDir()
	run := d.cli(t, work)
	alice := []string{"--state", filepath.Join(work, "alice")}
	bob := []string{"--state", filepath.Join(work, "bob")}
	as := func(who []string, cmd string, args ...string) []string {
		return append(append(strings.Fields(cmd), who...), args...)
	}
	lines := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}

	run(0, as(alice, "login", "--user", "1")...)
	run(0, as(bob, "login", "--user", "2")...)
	require.Equal(t, "created conversation 1", run(0, as(alice, "create", "--title", "s", "2")...))
	require.Equal(t, "created conversation 2", run(0, as(alice, "create", "--title", "t", "2")...))
	run(0, as(bob, "send", "--conversation", "1", "the quick brown fox")...)
	run(0, as(alice, "send", "--conversation", "1", "lunch at noon?")...)
	run(0, as(bob, "send", "--conversation", "2", "fox news at noon")...)
	for _, w := range []string{"one", "two", "three", "four", "five"} {
		run(0, as(alice, "send", "--conversation", "2", "page item "+w)...)
	}

	fox := lines(run(0, as(alice, "search", "fox")...))
	require.Len(t, fox, 2)
	require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d conv 2 #2  user 2: \[fox\] news at noon$`, fox[0], "newest first")
	require.Regexp(t, `conv 1 #2  user 2: the quick brown \[fox\]$`, fox[1])
	require.Regexp(t, `conv 1 #2  user 2: the quick \[brown\] \[fox\]$`, run(0, as(alice, "search", `"brown fox"`)...))
	require.Empty(t, run(0, as(alice, "search", `"quick fox"`)...))
	require.Regexp(t, `conv 1 #3  user 1: \[lunch\] at \[noon\]`, run(0, as(alice, "search", "noon", "lun")...))
	require.Empty(t, run(0, as(alice, "search", "--prefix=false", "noon", "lun")...))
	// Filters, before or after the words.
	require.Len(t, lines(run(0, as(alice, "search", "--conversation", "1", "fox")...)), 1)
	require.Len(t, lines(run(0, as(alice, "search", "fox", "--conversation", "2")...)), 1)
	require.Empty(t, run(0, as(alice, "search", "fox", "--sender", "1")...))
	require.Len(t, lines(run(0, as(alice, "search", "noon", "--sender", "1")...)), 1)
	require.Empty(t, run(0, as(alice, "search", "fox", "--has-attachment")...))
	require.Len(t, lines(run(0, as(alice, "search", "fox", "--has-attachment=false")...)), 2)
	require.Empty(t, run(0, as(alice, "search", "fox", "--mentions-me")...))
	require.Empty(t, run(0, as(alice, "search", "fox", "--after", time.Now().Add(time.Hour).Format(time.RFC3339))...))
	require.Len(t, lines(run(0, as(alice, "search", "fox", "--after", "2000-01-01", "--before", time.Now().Add(time.Hour).Format(time.RFC3339))...)), 2)
	require.Len(t, lines(run(0, as(alice, "search", "fox", "--order", "relevance")...)), 2)

	// Pages: the first with a hint, or every one with --all.
	first := lines(run(0, as(alice, "search", "--limit", "2", "item")...))
	require.Len(t, first, 3)
	require.Regexp(t, `conv 2 #7  user 1: page \[item\] five$`, first[0])
	require.Regexp(t, `conv 2 #6  user 1: page \[item\] four$`, first[1])
	require.Equal(t, "-- more results: --all prints them (5 found)", first[2])
	every := lines(run(0, as(alice, "search", "--limit", "2", "--all", "item")...))
	require.Len(t, every, 5)
	for i, w := range []string{"five", "four", "three", "two", "one"} {
		require.Regexp(t, `conv 2 #`+[]string{"7", "6", "5", "4", "3"}[i]+`  user 1: page \[item\] `+w+`$`, every[i])
	}

	// --json: the results as the protocol has them.
	var r client.SearchResult
	require.NoError(t, json.Unmarshal([]byte(run(0, as(alice, "search", "--json", "lunch")...)), &r))
	require.Equal(t, int64(1), r.Message.ConversationID)
	require.Equal(t, client.SnippetPart{Text: "lunch", Match: true}, r.Snippet[0])
	require.True(t, strings.HasPrefix(client.SnippetText(r.Snippet, nil), "lunch at noon"), "%+v", r.Snippet)

	require.Contains(t, run(1, as(alice, "search", "--order", "oldest", "fox")...), "--order must be newest or relevance")
	require.Contains(t, run(1, as(alice, "search")...), "give the words to search for")
	require.Contains(t, run(1, as(alice, "search", "fox", "--after", "yesterday")...), "--after")

	// A blocked sender's messages never come back; bob still finds his.
	run(0, as(alice, "block", "2")...)
	deadline := time.Now().Add(30 * time.Second)
	for run(0, as(alice, "search", "fox")...) != "" {
		require.True(t, time.Now().Before(deadline), "bob's messages still found after the block")
		time.Sleep(100 * time.Millisecond)
	}
	require.Len(t, lines(run(0, as(bob, "search", "fox")...)), 2)
}
