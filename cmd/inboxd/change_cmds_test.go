package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
)

// TestChangeCommands runs edit, delete, react (and --off), send --reply-to
// against `inboxd dev`, and reads the result back with history and tail:
// the markers of edited, deleted and replied messages and the reactions,
// tail's lines for update entries, and the JSON forms.
func TestChangeCommands(t *testing.T) {
	d := newDevInstance(t)
	d.start(t)
	require.NoError(t, d.proc.WaitOutput("partitions assigned", time.Minute))
	work := t.TempDir()
	run := d.cli(t, work)
	lines := func(s string) []string { return strings.Split(s, "\n") }
	alice := []string{"--state", filepath.Join(work, "alice")}
	bob := []string{"--state", filepath.Join(work, "bob")}
	// as puts the user's --state right after the command: flags go before
	// the arguments.
	as := func(who []string, cmd string, args ...string) []string {
		return append(append(strings.Fields(cmd), who...), args...)
	}

	run(0, as(alice, "login", "--user", "1")...)
	run(0, as(bob, "login", "--user", "2")...)
	require.Equal(t, "created conversation 1", run(0, as(alice, "create", "--title", "changes", "2")...))
	run(0, as(alice, "send", "--conversation", "1", "hello bob")...)
	run(0, as(alice, "send", "--conversation", "1", "typo")...)
	// bob's tail catches up: the messages as they are.
	tail := lines(run(0, as(bob, "tail", "--once")...))
	require.Contains(t, tail[len(tail)-1], "#3  user 1: typo")

	require.Regexp(t, `conv 1 #2  user 1: hello bob! \(edited\)$`,
		run(0, as(alice, "edit", "--conversation", "1", "--seq", "2", "hello", "bob!")...))
	require.Regexp(t, `conv 1 #2  user 1: hello bob! \(edited\) \[👍 1\]$`,
		run(0, as(bob, "react", "--conversation", "1", "--seq", "2", "👍")...))
	require.Regexp(t, `#2  user 1: hello bob! \(edited\) \[👍 2\]$`,
		run(0, as(alice, "react", "--conversation", "1", "--seq", "2", "👍")...))
	require.Regexp(t, `#2  user 1: hello bob! \(edited\) \[🎉 1, 👍 1\]$`,
		run(0, as(alice, "react", "--conversation", "1", "--seq", "2", "🎉")...))
	require.Regexp(t, `conv 1 #3  user 1: \(deleted\)$`, run(0, as(alice, "delete", "--conversation", "1", "--seq", "3")...))
	require.Contains(t, run(0, as(bob, "send", "--conversation", "1", "--reply-to", "2", "yes?")...), "as seq 4")

	// Refusals: bob edits alice's message; no reaction to a deleted one.
	require.Contains(t, run(1, as(bob, "edit", "--conversation", "1", "--seq", "2", "mine")...), "403 forbidden")
	require.Contains(t, run(1, as(bob, "react", "--conversation", "1", "--seq", "3", "👍")...), "400")
	require.Contains(t, run(1, as(bob, "react", "--conversation", "1", "--seq", "2")...), "give one emoji")

	hist := lines(run(0, as(bob, "history", "--conversation", "1")...))
	require.Len(t, hist, 4)
	require.Regexp(t, `#2  user 1: hello bob! \(edited\) \[🎉 1, 👍 1\]$`, hist[1])
	require.Regexp(t, `#3  user 1: \(deleted\)$`, hist[2])
	require.Regexp(t, `#4  user 2: ↩ #2 yes\?$`, hist[3])

	// bob's tail: each change once (the update entries read now all carry
	// the state as it is: one line per message). Messages printed by an
	// earlier run are shown as they are now.
	tail = lines(run(0, as(bob, "tail", "--once")...))
	require.Contains(t, tail, "         conv 1 (changes) #2 changed: hello bob! (edited) [🎉 1, 👍 1]")
	require.Contains(t, tail, "         conv 1 (changes) #3 deleted")
	require.Regexp(t, `#4  user 2: ↩ #2 yes\?$`, tail[len(tail)-1])
	run(0, as(bob, "react", "--off", "--conversation", "1", "--seq", "2")...)
	tail = lines(run(0, as(bob, "tail", "--once")...))
	require.Equal(t, []string{"         conv 1 (changes) #2 changed: hello bob! (edited) [🎉 1]"}, tail)

	// JSON: the message after the change; the update entries of tail.
	var m client.Message
	require.NoError(t, json.Unmarshal([]byte(run(0, as(alice, "edit", "--json", "--conversation", "1", "--seq", "2", "hi")...)), &m))
	require.Equal(t, "hi", m.Text())
	require.EqualValues(t, 7, m.Version)
	require.NotNil(t, m.EditedAt)
	var e client.Entry
	require.NoError(t, json.Unmarshal([]byte(run(0, as(bob, "tail", "--once", "--json")...)), &e))
	require.Equal(t, client.KindUpdate, e.Kind)
	require.Equal(t, "hi", e.Message.Text())

	// A report of alice's message by bob; none of one's own; roles.
	require.Regexp(t, `^reported #2 of conversation 1 \(spam\): report [0-9a-f-]{36}$`,
		run(0, as(bob, "report", "--conversation", "1", "--seq", "2", "--reason", "spam", "buy", "now")...))
	require.Contains(t, run(1, as(alice, "report", "--conversation", "1", "--seq", "2", "--reason", "spam")...), "400")
	require.Contains(t, run(1, as(bob, "report", "--conversation", "1", "--seq", "2")...), "give --reason")
	require.Equal(t, "user 2 is moderator: conversation 1",
		run(0, as(alice, "members role", "--conversation", "1", "--role", "moderator", "2")...))
	require.Regexp(t, `(?m)^2 +#1 +moderator$`, run(0, as(bob, "members list", "--conversation", "1")...))
	require.Contains(t, run(1, as(bob, "members role", "--conversation", "1", "--role", "member", "1")...), "403 forbidden")
	require.Regexp(t, `#5  \* user 1 made user 2 moderator$`, run(0, as(bob, "history", "--conversation", "1")...))

	// The moderator bans a user for an hour, lists it, lifts it.
	require.Regexp(t, `^banned until \S+ user 9: conversation 1$`,
		run(0, as(bob, "members ban", "--conversation", "1", "--for", "1h", "9")...))
	require.Regexp(t, `(?m)^9 +20\S+ +2 +20\S+$`, run(0, as(bob, "members bans", "--conversation", "1")...))
	require.Contains(t, run(1, as(alice, "members mute", "--conversation", "1", "1")...), "403 forbidden")
	require.Equal(t, "unbanned user 9: conversation 1", run(0, as(alice, "members unban", "--conversation", "1", "9")...))
	require.Regexp(t, `#7  \* user 1 unbanned user 9$`, run(0, as(bob, "history", "--conversation", "1")...))

	// Blocks: bob blocks alice, lists her once projected, then unblocks.
	require.Equal(t, "blocked user 1", run(0, as(bob, "block", "1")...))
	require.Contains(t, run(1, as(bob, "block", "2")...), "400")
	require.Eventually(t, func() bool {
		return regexp.MustCompile(`(?m)^1\tsince `).MatchString(run(0, as(bob, "blocks")...))
	}, 30*time.Second, 100*time.Millisecond, "bob's blocks list alice")
	require.Equal(t, "unblocked user 1", run(0, as(bob, "unblock", "1")...))

	// Settings: the moderator sets the slow mode, may not freeze; the
	// owner renames and freezes; the list and the history show it.
	require.Equal(t, "updated conversation 1", run(0, as(bob, "conversations update", "--conversation", "1", "--slow-mode", "30")...))
	require.Contains(t, run(1, as(bob, "conversations update", "--conversation", "1", "--frozen=true")...), "403 forbidden")
	require.Contains(t, run(1, as(bob, "conversations update", "--conversation", "1")...), "give --title, --frozen or --slow-mode")
	run(0, as(alice, "conversations update", "--conversation", "1", "--title", "renamed", "--frozen=true")...)
	require.Regexp(t, `(?m)^1 +renamed .*frozen,slow 30s`, run(0, as(bob, "conversations")...))
	hist = lines(run(0, as(bob, "history", "--conversation", "1")...))
	require.Regexp(t, `#8  \* user 2 set its slow mode to 30 s$`, hist[len(hist)-2])
	require.Regexp(t, `#9  \* user 1 renamed it "renamed", froze it$`, hist[len(hist)-1])
	require.NoError(t, d.proc.Stop(30*time.Second), d.proc.Output())
}

// updateLine names what changed, or the state when the previous one is
// not known.
func TestUpdateLine(t *testing.T) {
	now := time.Now()
	msg := func(text string, edited, deleted bool, rs ...client.Reaction) client.Message {
		raw, _ := json.Marshal(text)
		m := client.Message{ConversationID: 1, Seq: 12, Kind: "text", Body: raw, Deleted: deleted, Reactions: rs}
		if edited {
			m.EditedAt = &now
		}
		return m
	}
	thumbs := client.Reaction{Emoji: "👍", Count: 2}
	for _, tc := range []struct {
		prev, m client.Message
		want    string
	}{
		{msg("a", false, false), msg("b", true, false), "#12 edited: b"},
		{msg("a", false, false), msg("a", false, false, thumbs), "#12 reactions: [👍 2]"},
		{msg("a", false, false, thumbs), msg("b", true, false), "#12 edited: b; reactions: []"},
		{msg("a", false, false), msg("", false, true), "#12 deleted"},
		{client.Message{}, msg("b", true, false, thumbs), "#12 changed: b (edited) [👍 2]"},
		{client.Message{}, msg("", false, true), "#12 deleted"},
	} {
		require.Equal(t, "         conv 1 "+tc.want, updateLine("conv 1", tc.prev, tc.m))
	}
}
