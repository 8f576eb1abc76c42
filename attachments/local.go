package attachments

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
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
	"slices"
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
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), mpPrefix) {
			return filepath.SkipDir
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), ".put-") {
			return nil
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
		q := r.URL.Query()
		if q.Has("upload") || q.Has("part") {
			s.servePart(w, r, key)
			return
		}
		exp, err := strconv.ParseInt(q.Get("expires"), 10, 64)
		sig := q.Get("signature")
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

// A multipart upload of a LocalStore is a directory beside the objects,
// mpPrefix and the upload's id, holding the object's key (in the file
// "key") and one file per part, named by its number; completing it joins
// the parts into the object.
const mpPrefix = ".mp-"

func validUploadID(id string) error {
	if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		return fmt.Errorf("local store: %q is not a multipart upload id", id)
	}
	return nil
}

// mpDir is the directory of multipart upload id of key, once checked.
func (s *LocalStore) mpDir(key, id string) (string, error) {
	if err := validKey(key); err != nil {
		return "", err
	}
	if err := validUploadID(id); err != nil {
		return "", err
	}
	dir := filepath.Join(s.dir, mpPrefix+id)
	k, err := os.ReadFile(filepath.Join(dir, "key"))
	if errors.Is(err, fs.ErrNotExist) || err == nil && string(k) != key {
		return "", ErrNotFound
	}
	return dir, err
}

// CreateMultipart implements Store.
func (s *LocalStore) CreateMultipart(_ context.Context, key string) (string, error) {
	if err := validKey(key); err != nil {
		return "", err
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b)
	dir := filepath.Join(s.dir, mpPrefix+id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "key"), []byte(key), 0o600); err != nil {
		return "", err
	}
	return id, nil
}

// partTarget is what a part's URL signs: the key, the upload and the part.
func partTarget(key, id string, number int) string { return fmt.Sprintf("%s\n%s\n%d", key, id, number) }

// PresignPart implements Store.
func (s *LocalStore) PresignPart(_ context.Context, key, id string, number int, ttl time.Duration) (string, http.Header, error) {
	if err := validKey(key); err != nil {
		return "", nil, err
	}
	if err := validUploadID(id); err != nil {
		return "", nil, err
	}
	if number < 1 || number > MaxParts {
		return "", nil, fmt.Errorf("local store: parts are 1 to %d, not %d", MaxParts, number)
	}
	exp := s.now().Add(ttl).Unix()
	q := url.Values{"upload": {id}, "part": {strconv.Itoa(number)}, "expires": {strconv.FormatInt(exp, 10)},
		"signature": {s.sign(http.MethodPut, partTarget(key, id, number), exp)}}
	return s.base + LocalPath + key + "?" + q.Encode(), http.Header{}, nil
}

// partETag is a part's ETag: its size and modification time, enough for
// completion to notice a part written again since it was listed.
func partETag(fi fs.FileInfo) string {
	return fmt.Sprintf("%x-%x", fi.Size(), fi.ModTime().UnixNano())
}

// Parts implements Store.
func (s *LocalStore) Parts(_ context.Context, key, id string) ([]Part, error) {
	dir, err := s.mpDir(key, id)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var parts []Part
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n < 1 || n > MaxParts {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		parts = append(parts, Part{Number: n, Size: fi.Size(), ETag: partETag(fi)})
	}
	slices.SortFunc(parts, func(a, b Part) int { return a.Number - b.Number })
	return parts, nil
}

// CompleteMultipart implements Store: the parts are joined in a temporary
// file renamed into place, then the upload's directory goes.
func (s *LocalStore) CompleteMultipart(ctx context.Context, key, id string, parts []Part) error {
	dir, err := s.mpDir(key, id)
	if err != nil {
		return err
	}
	files := make([]*os.File, 0, len(parts))
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var size int64
	for i, p := range parts {
		if p.Number <= 0 || i > 0 && p.Number <= parts[i-1].Number {
			return fmt.Errorf("local store: parts out of order at part %d", p.Number)
		}
		f, err := os.Open(filepath.Join(dir, strconv.Itoa(p.Number)))
		if err != nil {
			return fmt.Errorf("local store: part %d: %w", p.Number, err)
		}
		files = append(files, f)
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if partETag(fi) != p.ETag {
			return fmt.Errorf("local store: part %d is not the one listed", p.Number)
		}
		size += fi.Size()
	}
	rs := make([]io.Reader, len(files))
	for i, f := range files {
		rs[i] = f
	}
	if err := s.Put(ctx, key, io.MultiReader(rs...), size); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// AbortMultipart implements Store.
func (s *LocalStore) AbortMultipart(_ context.Context, key, id string) error {
	dir, err := s.mpDir(key, id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// servePart takes the PUT of a part on a URL PresignPart signed.
func (s *LocalStore) servePart(w http.ResponseWriter, r *http.Request, key string) {
	q := r.URL.Query()
	id := q.Get("upload")
	n, nerr := strconv.Atoi(q.Get("part"))
	exp, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	switch {
	case r.Method != http.MethodPut:
		w.Header().Set("Allow", "PUT")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	case validKey(key) != nil || validUploadID(id) != nil || nerr != nil || err != nil ||
		!hmac.Equal([]byte(q.Get("signature")), []byte(s.sign(http.MethodPut, partTarget(key, id, n), exp))):
		http.Error(w, "signature does not match", http.StatusForbidden)
		return
	case s.now().Unix() > exp:
		http.Error(w, "request has expired", http.StatusForbidden)
		return
	case r.ContentLength < 0:
		http.Error(w, "Content-Length is required", http.StatusLengthRequired)
		return
	}
	dir, err := s.mpDir(key, id)
	if err != nil {
		http.Error(w, "no such upload", http.StatusNotFound)
		return
	}
	f, err := os.CreateTemp(dir, ".put-*")
	if err != nil {
		http.Error(w, "could not store the part", http.StatusInternalServerError)
		return
	}
	defer os.Remove(f.Name())
	c, err := io.Copy(f, io.LimitReader(r.Body, r.ContentLength+1))
	if err == nil && c != r.ContentLength {
		err = errors.New("short body")
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, strconv.Itoa(n)))
	}
	if err != nil {
		http.Error(w, "could not store the part", http.StatusBadRequest)
		return
	}
	if fi, err := os.Stat(filepath.Join(dir, strconv.Itoa(n))); err == nil {
		w.Header().Set("ETag", `"`+partETag(fi)+`"`)
	}
	w.WriteHeader(http.StatusOK)
}
