package importer

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/replay"
)

// TestImportResumes cancels an import in the middle of a chunk (after a
// checkpoint, with later lines appended that the checkpoint does not
// cover) and runs it again: it resumes from the checkpoint, and the
// projections are those of one clean import, nothing missing or doubled.
func TestImportResumes(t *testing.T) {
	h := history{convs: 40, msgsPerConv: 100, members: 3}
	path := writeHistory(t, h)
	ctx := context.Background()

	// The reference: one uninterrupted import into a world of its own.
	ref := testenv.New(t, testenv.Options{Partitions: 4})
	ref.StartFanout(t)
	_, err := Run(ctx, Config{File: path, Source: "oldchat", Wait: true, Logger: ref.Logger}, ref.Pool, ref.Producer)
	require.NoError(t, err)
	want := takeSnapshot(t, ref.Pool)

	env := testenv.New(t, testenv.Options{Partitions: 4})
	env.StartFanout(t)
	cut, cancel := context.WithCancel(ctx)
	defer cancel()
	const cutAt = 2345 // in the fifth chunk of 500 lines
	cfg := Config{File: path, Source: "oldchat", Wait: true, Logger: env.Logger, ChunkLines: 500,
		lineHook: func(n int64) {
			if n == cutAt {
				// The lines of the chunk so far reach the log, the
				// checkpoint does not: a kill between the two.
				require.NoError(t, env.Producer.Flush(ctx))
				cancel()
			}
		}}
	_, err = Run(cut, cfg, env.Pool, env.Producer)
	require.True(t, errors.Is(err, context.Canceled), "the cut run: %v", err)
	env.WaitCaughtUp(t, time.Minute)
	var next int64
	var done bool
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT next_line, done FROM import_checkpoints`).Scan(&next, &done))
	require.False(t, done)
	require.Equal(t, int64(2001), next, "the checkpoint is the last chunk the log acknowledged")
	// Lines past the checkpoint were appended and projected by the cut run.
	require.Greater(t, count(t, env.Pool, `SELECT count(*) FROM messages WHERE imported AND kind = 'text'`), int64(2000-h.convs))

	cfg.lineHook = nil
	res, err := Run(ctx, cfg, env.Pool, env.Producer)
	require.NoError(t, err)
	require.Equal(t, int64(2001), res.From)
	verify(t, env.Pool)
	got := takeSnapshot(t, env.Pool)
	for _, table := range []string{"messages", "member_spans", "conversations"} {
		require.Equal(t, want[table], got[table], table)
	}
	// The inbox, users and records tables differ from the reference only
	// in interleaving across conversations; their counts match.
	for _, table := range []string{"inbox", "users", "records", "rejections"} {
		require.Equal(t, want[table].Rows, got[table].Rows, table)
	}

	// The import is in the log: a replay rebuilds the same projections
	// from it, duplicates and all.
	rep, err := replay.Run(ctx, replay.Config{Brokers: env.Brokers, Topic: env.Topic, Logger: env.Logger,
		Progress: io.Discard, Verify: true}, env.Pool)
	require.NoError(t, err)
	require.True(t, rep.Diff.Empty(), rep.Diff.String())
}
