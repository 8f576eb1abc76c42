package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// FileStore keeps the State in one JSON file. Every Save writes a temporary
// file beside it, fsyncs it, renames it over the file and fsyncs the
// directory, so a crash leaves the previous or the new state, never a torn
// one. The file is locked (flock, where the OS has it) while the FileStore
// is open: two processes sharing one state file would each lose the other's
// cursor and outbox, so the second one fails to open instead.
//
// A Save costs a file rewrite and two fsyncs (milliseconds on most disks);
// Config.CommitEvery trades that against the entries redelivered after a
// crash. It is safe for concurrent use.
type FileStore struct {
	path string
	mu   sync.Mutex
	lock *os.File
}

// OpenFileStore opens (creating its directory) the state file at path and
// locks it. Close releases the lock.
func OpenFileStore(path string) (*FileStore, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("client: state directory for %s: %w", path, err)
	}
	lf, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("client: open lock of %s: %w", path, err)
	}
	if err := lockFile(lf); err != nil {
		_ = lf.Close()
		return nil, fmt.Errorf("client: state file %s is in use by another process: %w", path, err)
	}
	return &FileStore{path: path, lock: lf}, nil
}

// Path is the state file.
func (f *FileStore) Path() string { return f.path }

// Close releases the lock.
func (f *FileStore) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lock == nil {
		return nil
	}
	err := f.lock.Close() // closing the descriptor releases the flock
	f.lock = nil
	return err
}

// Load implements Store.
func (f *FileStore) Load(context.Context) (*State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	raw, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("client: read state %s: %w", f.path, err)
	}
	s, err := decodeState(raw)
	if err != nil {
		return nil, fmt.Errorf("client: decode state %s: %w", f.path, err)
	}
	return s, nil
}

// Save implements Store.
func (f *FileStore) Save(_ context.Context, s *State) error {
	raw, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("client: encode state: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lock == nil {
		return fmt.Errorf("client: state file %s is closed", f.path)
	}
	if err := writeFileAtomic(f.path, raw); err != nil {
		return fmt.Errorf("client: save state %s: %w", f.path, err)
	}
	return nil
}

// writeFileAtomic replaces path with data: temporary file, fsync, rename,
// fsync of the directory.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer func() {
		if name != "" {
			_ = os.Remove(name)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(name, path); err != nil {
		return err
	}
	name = ""
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	// Some file systems refuse to sync a directory; the rename is then as
	// durable as they make it.
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}
