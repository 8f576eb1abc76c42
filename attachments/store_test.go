package attachments_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/internal/s3test"
)

func TestMain(m *testing.M) { os.Exit(s3test.Run(m.Run)) }

// stores runs the contract on each Store: a directory served by a test
// HTTP server standing in for the gateway, and a real SeaweedFS bucket.
func stores(t *testing.T) map[string]attachments.Store {
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	local, err := attachments.NewLocal(t.TempDir(), srv.URL, []byte("0123456789abcdef0123"))
	require.NoError(t, err)
	mux.Handle(attachments.LocalPath, local.Handler())
	out := map[string]attachments.Store{"local": local}
	if testing.Short() && os.Getenv(s3test.EnvEndpoint) == "" {
		t.Log("-short: the S3 store is not started")
		return out
	}
	s3, _ := s3test.Store(t)
	out["s3"] = s3
	return out
}

func do(t *testing.T, method, u string, body []byte, h http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	require.NoError(t, err)
	for k, v := range h {
		req.Header[k] = v
	}
	if body == nil {
		req.Body = nil
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestStoreContract: what the gateway relies on of any store.
func TestStoreContract(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			data := make([]byte, 200_000)
			_, _ = rand.Read(data)

			// A presigned PUT stores the bytes; Stat and Open see them.
			put, h, err := st.PresignPut(ctx, "u-1-a", time.Minute)
			require.NoError(t, err)
			resp := do(t, http.MethodPut, put, data, h)
			require.Less(t, resp.StatusCode, 300, "PUT: %d", resp.StatusCode)
			n, err := st.Stat(ctx, "u-1-a")
			require.NoError(t, err)
			require.EqualValues(t, len(data), n)
			r, err := st.Open(ctx, "u-1-a")
			require.NoError(t, err)
			got, err := io.ReadAll(r)
			require.NoError(t, err)
			r.Close()
			require.True(t, bytes.Equal(data, got))

			// A presigned GET serves them, byte ranges too.
			get, err := st.PresignGet(ctx, "u-1-a", time.Minute)
			require.NoError(t, err)
			resp = do(t, http.MethodGet, get, nil, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			got, err = io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.True(t, bytes.Equal(data, got))
			resp = do(t, http.MethodGet, get, nil, http.Header{"Range": {"bytes=70000-70099"}})
			require.Equal(t, http.StatusPartialContent, resp.StatusCode)
			got, err = io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, data[70000:70100], got)

			// A changed URL is refused, and so is an expired one.
			u, err := url.Parse(get)
			require.NoError(t, err)
			u.Path = strings.Replace(u.Path, "u-1-a", "u-1-b", 1)
			resp = do(t, http.MethodGet, u.String(), nil, nil)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "another key on the signature")
			resp = do(t, http.MethodPut, get, []byte("x"), nil)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "a GET URL used to PUT")
			short, err := st.PresignGet(ctx, "u-1-a", time.Second)
			require.NoError(t, err)
			time.Sleep(2100 * time.Millisecond)
			resp = do(t, http.MethodGet, short, nil, nil)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "expired")

			// The server's own Put, the listing, and deletes.
			require.NoError(t, st.Put(ctx, "u-2-t", bytes.NewReader(data[:10]), 10))
			require.NoError(t, st.Put(ctx, "v-3", bytes.NewReader(data[:5]), 5))
			keys, err := st.Keys(ctx, "u-")
			require.NoError(t, err)
			sort.Strings(keys)
			require.Equal(t, []string{"u-1-a", "u-2-t"}, keys)
			require.NoError(t, st.Delete(ctx, "u-1-a"))
			require.NoError(t, st.Delete(ctx, "u-1-a"), "a missing object is no error")
			_, err = st.Stat(ctx, "u-1-a")
			require.True(t, errors.Is(err, attachments.ErrNotFound), "%v", err)
			_, err = st.Open(ctx, "u-1-a")
			require.True(t, errors.Is(err, attachments.ErrNotFound), "%v", err)
			resp = do(t, http.MethodGet, get, nil, nil)
			require.Equal(t, http.StatusNotFound, resp.StatusCode, "a deleted object's URL")
		})
	}
}

// TestStoreMultipart: a large file in parts, PUT on presigned URLs in any
// order and again, listed, then joined; or dropped.
func TestStoreMultipart(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			// Every part but the last is of S3's least part size, 5 MiB.
			const ps = 5 << 20
			data := make([]byte, 2*ps+50_000)
			_, _ = rand.Read(data)
			chunks := [][]byte{data[:ps], data[ps : 2*ps], data[2*ps:]}

			id, err := st.CreateMultipart(ctx, "m-1")
			require.NoError(t, err)
			urls := make([]string, 3)
			for i := range urls {
				u, h, err := st.PresignPart(ctx, "m-1", id, i+1, time.Minute)
				require.NoError(t, err)
				require.Empty(t, h)
				urls[i] = u
			}
			for _, i := range []int{2, 0} {
				resp := do(t, http.MethodPut, urls[i], chunks[i], nil)
				require.Less(t, resp.StatusCode, 300, "PUT part %d: %d", i+1, resp.StatusCode)
			}
			parts, err := st.Parts(ctx, "m-1", id)
			require.NoError(t, err)
			require.Len(t, parts, 2)
			require.Equal(t, 1, parts[0].Number)
			require.EqualValues(t, ps, parts[0].Size)
			require.Equal(t, 3, parts[1].Number)
			require.EqualValues(t, 50_000, parts[1].Size)

			// A part's URL with another part number is refused.
			u, err := url.Parse(urls[1])
			require.NoError(t, err)
			q := u.Query()
			q.Set(map[bool]string{true: "part", false: "partNumber"}[name == "local"], "4")
			u.RawQuery = q.Encode()
			resp := do(t, http.MethodPut, u.String(), chunks[1], nil)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "a changed part number")

			// Part 2, twice (a retry), then the whole.
			for range 2 {
				resp = do(t, http.MethodPut, urls[1], chunks[1], nil)
				require.Less(t, resp.StatusCode, 300, "PUT part 2: %d", resp.StatusCode)
			}
			parts, err = st.Parts(ctx, "m-1", id)
			require.NoError(t, err)
			require.Len(t, parts, 3)
			_, err = st.Stat(ctx, "m-1")
			require.True(t, errors.Is(err, attachments.ErrNotFound), "no object before completion: %v", err)
			require.NoError(t, st.CompleteMultipart(ctx, "m-1", id, parts))
			n, err := st.Stat(ctx, "m-1")
			require.NoError(t, err)
			require.EqualValues(t, len(data), n)
			r, err := st.Open(ctx, "m-1")
			require.NoError(t, err)
			got, err := io.ReadAll(r)
			require.NoError(t, err)
			r.Close()
			require.True(t, bytes.Equal(data, got))
			_, err = st.Parts(ctx, "m-1", id)
			require.True(t, errors.Is(err, attachments.ErrNotFound), "a completed upload is no more: %v", err)
			keys, err := st.Keys(ctx, "m-")
			require.NoError(t, err)
			require.Equal(t, []string{"m-1"}, keys)

			// An aborted upload leaves nothing.
			id2, err := st.CreateMultipart(ctx, "m-2")
			require.NoError(t, err)
			u2, _, err := st.PresignPart(ctx, "m-2", id2, 1, time.Minute)
			require.NoError(t, err)
			resp = do(t, http.MethodPut, u2, chunks[0], nil)
			require.Less(t, resp.StatusCode, 300)
			require.NoError(t, st.AbortMultipart(ctx, "m-2", id2))
			require.NoError(t, st.AbortMultipart(ctx, "m-2", id2), "an upload that is no more is no error")
			_, err = st.Parts(ctx, "m-2", id2)
			require.True(t, errors.Is(err, attachments.ErrNotFound), "%v", err)
			keys, err = st.Keys(ctx, "m-")
			require.NoError(t, err)
			require.Equal(t, []string{"m-1"}, keys)
		})
	}
}

// TestS3PublicEndpoint: the gateway reaches the store on one URL, and the
// clients' URLs are signed for another that reaches the same store.
func TestS3PublicEndpoint(t *testing.T) {
	if testing.Short() && os.Getenv(s3test.EnvEndpoint) == "" {
		t.Skip("-short: the S3 store is not started")
	}
	_, srv := s3test.Store(t)
	ctx := context.Background()
	public := strings.Replace(srv.Endpoint, "127.0.0.1", "localhost", 1)
	require.NotEqual(t, public, srv.Endpoint)
	st, err := attachments.NewS3(ctx, attachments.S3Config{Endpoint: srv.Endpoint, PublicEndpoint: public,
		Bucket: "public-endpoint", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	put, h, err := st.PresignPut(ctx, "p-1", time.Minute)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(put, public+"/"), "signed for the public endpoint: %s", put)
	resp := do(t, http.MethodPut, put, []byte("seen from outside"), h)
	require.Less(t, resp.StatusCode, 300, "PUT: %d", resp.StatusCode)
	n, err := st.Stat(ctx, "p-1")
	require.NoError(t, err, "the gateway's own endpoint sees it")
	require.EqualValues(t, 17, n)
	get, err := st.PresignGet(ctx, "p-1", time.Minute)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(get, public+"/"))
	resp = do(t, http.MethodGet, get, nil, nil)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "seen from outside", string(body))
	_, err = attachments.NewS3(ctx, attachments.S3Config{Endpoint: srv.Endpoint, PublicEndpoint: "localhost:9000",
		Bucket: "public-endpoint", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	require.Error(t, err, "a public endpoint that is not a URL")
}
