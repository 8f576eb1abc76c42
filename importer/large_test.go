package importer

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
)

// TestImportLargeConversations imports into read fan-out
// (docs/large-conversations.md), with a threshold of 4 members: conversations
// created above it and one that crosses it with a join in the middle of its
// history. The invariants hold (I3 and L1-L4 included), no imported message
// is an inbox entry, and nothing is unread.
func TestImportLargeConversations(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 2, LargeThreshold: 4})
	env.StartFanout(t)
	// 30 conversations created with 4 members (at the threshold), one more
	// joins halfway: each switches to read fan-out there.
	h := history{convs: 30, msgsPerConv: 40, members: 4}
	path := writeHistory(t, h)
	_, err := Run(context.Background(), Config{File: path, Source: "big", Wait: true, Logger: env.Logger}, env.Pool, env.Producer)
	require.NoError(t, err)
	verify(t, env.Pool)
	pool := env.Pool
	require.Equal(t, int64(h.convs), count(t, pool, `SELECT count(*) FROM conversations WHERE read_fanout`))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM inbox i JOIN messages m
  ON m.conversation_id = i.conversation_id AND m.seq = i.seq AND i.kind = 1 WHERE m.kind = 'text'`))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM records r
JOIN messages m ON m.conversation_id = r.conversation_id AND m.seq > r.read_seq AND m.kind = 'text' AND m.sender_id <> r.user_id
WHERE NOT r.removed`))

	// Created above the threshold: read fan-out from seq 1.
	h = history{convs: 5, msgsPerConv: 20, members: 6}
	path = writeHistory(t, h)
	_, err = Run(context.Background(), Config{File: path, Source: "bigger", Wait: true, Logger: env.Logger}, env.Pool, env.Producer)
	require.NoError(t, err)
	verify(t, env.Pool)
	require.Zero(t, count(t, pool, `SELECT count(*) FROM inbox i JOIN messages m
  ON m.conversation_id = i.conversation_id AND m.seq = i.seq AND i.kind = 1 WHERE m.kind = 'text'`))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM records r
JOIN messages m ON m.conversation_id = r.conversation_id AND m.seq > r.read_seq AND m.kind = 'text' AND m.sender_id <> r.user_id
WHERE NOT r.removed`))
}
