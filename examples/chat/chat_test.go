package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
)

// Two people chat through inboxd dev, each with the program's stdin piped:
// the first starts the conversation, the second joins it and answers.
func TestChat(t *testing.T) {
	dev := testenv.NewDev(t)
	ctx := testenv.Ctx(t, 2*time.Minute)

	var alice bytes.Buffer
	require.NoError(t, run(ctx, []string{"-url", dev.URL, "-user", "1", "-with", "2"},
		strings.NewReader("hello bob\n\nlunch at noon?\n"), &alice))
	m := regexp.MustCompile(`^conversation (\d+) `).FindStringSubmatch(alice.String())
	require.NotNil(t, m, alice.String())
	cid := m[1]
	require.Equal(t, fmt.Sprintf("conversation %s (others join with -conversation %s)\n1: hello bob\n1: lunch at noon?\n", cid, cid),
		alice.String())

	var bob bytes.Buffer
	require.NoError(t, run(ctx, []string{"-url", dev.URL, "-user", "2", "-conversation", cid},
		strings.NewReader("yes!\n"), &bob))
	require.Equal(t, "1: hello bob\n1: lunch at noon?\n2: yes!\n", bob.String())
}

func TestChatFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-user", "1"},
		{"-user", "1", "-with", "2", "-conversation", "3"},
		{"-user", "1", "-with", "two"},
	} {
		err := run(context.Background(), args, strings.NewReader(""), &bytes.Buffer{})
		require.Error(t, err, "%v", args)
	}
}
