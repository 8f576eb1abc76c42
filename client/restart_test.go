package client_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
)

// failingStore fails every Save after the first `after` ones: a crash
// between the app's handler and the cursor's save.
type failingStore struct {
	client.Store
	saves, after atomic.Int64
}

var errDiskGone = errors.New("disk gone (injected)")

func (s *failingStore) Save(ctx context.Context, st *client.State) error {
	if a := s.after.Load(); a > 0 && s.saves.Add(1) > a {
		return errDiskGone
	}
	return s.Store.Save(ctx, st)
}

// TestRestart: the durable store carries the cursor and the outbox across
// restarts of the app. Sends queued while offline go out after the
// restart, once each; entries continue where they stopped, once each. An
// app handler that fails stops Run and gets the entry again on the next
// run. A crash after the handler but before the save hands that entry over
// again: the at-least-once boundary of CommitEvery=1 is one entry.
func TestRestart(t *testing.T) {
	noClientGoroutines(t)
	w := newWorld(t, nil, nil)
	ctx := context.Background()
	bob := w.direct(t, 2)
	cid, err := bob.CreateConversation(ctx, "restarts", 1)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "alice", "state.json")
	a := newApp()

	open := func() (*client.FileStore, *client.Client) {
		t.Helper()
		fs, err := client.OpenFileStore(path)
		require.NoError(t, err)
		cfg := w.config(t, w.url, 1, a)
		cfg.Store = fs
		c, err := client.New(cfg)
		require.NoError(t, err)
		return fs, c
	}

	// Offline: sends are queued and saved; the app exits.
	fs, c := open()
	_, err = client.OpenFileStore(path)
	require.Error(t, err, "a second process must not share the state file")
	var ids []string
	for i := 0; i < 5; i++ {
		id, err := c.Send(ctx, cid, "queued offline")
		require.NoError(t, err)
		ids = append(ids, id)
	}
	require.NoError(t, fs.Close())

	// Back: the outbox goes out; bob talks; the app stops midway.
	fs, c = open()
	require.Len(t, c.Outbox(), 5)
	r := start(t, c, a)
	w.post(t, 2, cid, 15)
	converge(t, w, 1, r, ids)
	w.post(t, 2, cid, 15)
	require.NoError(t, r.stop())
	require.NoError(t, fs.Close())

	fs, c = open()
	r = start(t, c, a)
	converge(t, w, 1, r, nil)
	requireExactlyOnce(t, w, 1, a.snapshot())
	requireSent(t, w, a, ids)

	// The app's handler fails: Run stops with its error; the entry comes
	// again (once) on the next run.
	a.mu.Lock()
	a.failAt = w.head(t, 1) + 3
	a.mu.Unlock()
	w.post(t, 2, cid, 10)
	err = <-r.done
	r.done <- err
	require.ErrorIs(t, err, errAppFailed)
	require.False(t, client.IsPermanent(err))
	require.NoError(t, fs.Close())
	fs, c = open()
	r = start(t, c, a)
	converge(t, w, 1, r, nil)
	requireExactlyOnce(t, w, 1, a.snapshot())
	require.NoError(t, r.stop())
	require.NoError(t, fs.Close())

	// A crash between a handler and the save of its cursor.
	fs, err = client.OpenFileStore(path)
	require.NoError(t, err)
	failing := &failingStore{Store: fs}
	failing.after.Store(3)
	cfg := w.config(t, w.url, 1, a)
	cfg.Store = failing
	c, err = client.New(cfg)
	require.NoError(t, err)
	r = start(t, c, a)
	w.post(t, 2, cid, 10)
	err = <-r.done
	r.done <- err
	require.ErrorIs(t, err, errDiskGone)
	require.NoError(t, fs.Close())
	before := len(a.snapshot())
	fs, c = open()
	r = start(t, c, a)
	converge(t, w, 1, r, nil)
	got := a.snapshot()
	// The entry whose save failed is handed over twice; nothing else.
	require.Equal(t, got[before-1].InboxSeq, got[before].InboxSeq, "the unsaved entry comes again")
	dedup := append(append([]client.Entry(nil), got[:before-1]...), got[before:]...)
	requireExactlyOnce(t, w, 1, dedup)
	require.NoError(t, r.stop())
	require.NoError(t, fs.Close())
}
