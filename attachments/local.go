package attachments

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// LocalPath is the gateway's route of a LocalStore's objects; the key
// follows it.
const LocalPath = "/v1/blobs/"

// LocalStore is a Store in a directory, with URLs the gateway signs and
// serves itself (Handler): what `inboxd dev` uses when no object store
// is configured, as kfake stands in for Kafka. The contract is the same
// as a bucket's: a presigned PUT, a presigned GET with byte ranges, and
// a URL that stops working when it expires or is changed.
type LocalStore struct {
	dir    string
	base   string // the gateway's public URL, without a trailing slash
	secret []byte
	now    func() time.Time
}

// NewLocal keeps objects in dir and signs URLs on base (the gateway's
// public URL, e.g. http://localhost:8080) with secret.
func NewLocal(dir, base string, secret []byte) (*LocalStore, error) {
	if len(secret) < 16 {
		return nil, errors.New("local store: the signing secret must be at least 16 bytes")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("local store %s: %w", dir, err)
	}
	return &LocalStore{dir: dir, base: strings.TrimSuffix(base, "/"), secret: secret, now: time.Now}, nil
}

// validKey refuses keys that would leave the directory or be ambiguous:
// a key is one path segment (the gateway's route is /v1/blobs/{key}).
func validKey(key string) error {
	if key == "" || len(key) > 255 || strings.Contains(key, "..") || strings.ContainsAny(key, "/\\\x00?#%") {
		return fmt.Errorf("local store: key %q is not allowed", key)
	}
	return nil
}

func (s *LocalStore) path(key string) string { return filepath.Join(s.dir, filepath.FromSlash(key)) }

// sign is the signature of a method on key until exp.
func (s *LocalStore) sign(method, key string, exp int64) string {
	m := hmac.New(sha256.New, s.secret)
	fmt.Fprintf(m, "%s\n%s\n%d", method, key, exp)
	return hex.EncodeToString(m.Sum(nil))
}

func (s *LocalStore) presign(method, key string, ttl time.Duration) (string, error) {
	if err := validKey(key); err != nil {
		return "", err
	}
	exp := s.now().Add(ttl).Unix()
	q := url.Values{"expires": {strconv.FormatInt(exp, 10)}, "signature": {s.sign(method, key, exp)}}
	return s.base + LocalPath + key + "?" + q.Encode(), nil
}

// PresignPut implements Store.
func (s *LocalStore) PresignPut(_ context.Context, key string, ttl time.Duration) (string, http.Header, error) {
	u, err := s.presign(http.MethodPut, key, ttl)
	return u, http.Header{}, err
}

// PresignGet implements Store.
func (s *LocalStore) PresignGet(_ context.Context, key string, ttl time.Duration) (string, error) {
	return s.presign(http.MethodGet, key, ttl)
}

// Stat implements Store.
func (s *LocalStore) Stat(_ context.Context, key string) (int64, error) {
	if err := validKey(key); err != nil {
		return 0, err
	}
	fi, err := os.Stat(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// Open implements Store.
func (s *LocalStore) Open(_ context.Context, key string) (io.ReadCloser, error) {
	if err := validKey(key); err != nil {
		return nil, err
	}
	f, err := os.Open(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	return f, err
}

// Put implements Store: the bytes go to a temporary file renamed into
// place, so a reader never sees half an object.
func (s *LocalStore) Put(_ context.Context, key string, r io.Reader, size int64) error {
	if err := validKey(key); err != nil {
		return err
	}
	p := s.path(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".put-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	n, err := io.Copy(f, io.LimitReader(r, size+1))
	if err == nil && n != size {
		err = fmt.Errorf("local store: %d bytes where %d were announced", n, size)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

// Delete implements Store.
func (s *LocalStore) Delete(_ context.Context, key string) error {
	if err := validKey(key); err != nil {
		return err
	}
	if err := os.Remove(s.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Keys implements Store.
func (s *LocalStore) Keys(_ context.Context, prefix string) ([]string, error) {
	var keys []string
	err := filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".put-") {
			return err
		}
		rel, err := filepath.Rel(s.dir, p)
		if err != nil {
			return err
		}
		if k := filepath.ToSlash(rel); strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
		return nil
	})
	return keys, err
}

// Handler serves the URLs the store signs, under LocalPath: a PUT stores
// the request's body (its Content-Length is required), a GET or HEAD
// serves the object with byte ranges. A URL that has expired, or whose
// method, key or expiry was changed, gets 403, as a bucket answers.
func (s *LocalStore) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, LocalPath)
		method := r.Method
		if method == http.MethodHead {
			method = http.MethodGet
		}
		exp, err := strconv.ParseInt(r.URL.Query().Get("expires"), 10, 64)
		sig := r.URL.Query().Get("signature")
		switch {
		case method != http.MethodGet && method != http.MethodPut:
			w.Header().Set("Allow", "GET, HEAD, PUT")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		case validKey(key) != nil || err != nil || !hmac.Equal([]byte(sig), []byte(s.sign(method, key, exp))):
			http.Error(w, "signature does not match", http.StatusForbidden)
			return
		case s.now().Unix() > exp:
			http.Error(w, "request has expired", http.StatusForbidden)
			return
		}
		if method == http.MethodPut {
			if r.ContentLength < 0 {
				http.Error(w, "Content-Length is required", http.StatusLengthRequired)
				return
			}
			if err := s.Put(r.Context(), key, r.Body, r.ContentLength); err != nil {
				http.Error(w, "could not store the object", http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusOK)
			return
		}
		f, err := os.Open(s.path(key))
		if err != nil {
			http.Error(w, "no such key", http.StatusNotFound)
			return
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			http.Error(w, "no such key", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", fi.ModTime(), f)
	})
}
