package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"

	"github.com/inboxd/inboxd/internal/testenv"
)

// TestPages: Config.Pages are served beside the API as they are; without
// them (dev mode or not) the gateway serves no page, and a request for one
// answers 404 in the error shape. Patterns that ServeMux refuses are
// configuration errors from New, not panics.
func TestPages(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<p>page</p>") //nolint:errcheck
	})
	get := func(t *testing.T, pages map[string]http.Handler, path string) (int, string) {
		t.Helper()
		g, err := NewOn(wsTestConfig(env, func(c *Config) { c.Pages = pages }), placementOf(env), env.Producer)
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		g.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	notFound := func(t *testing.T, code int, body string) {
		t.Helper()
		require.Equal(t, http.StatusNotFound, code)
		var e protocol.ErrorBody
		require.NoError(t, json.Unmarshal([]byte(body), &e), body)
		require.Equal(t, protocol.CodeNotFound, e.Error.Code)
	}

	pages := map[string]http.Handler{"GET /{$}": page, "GET /demo/": page}
	code, body := get(t, pages, "/")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "<p>page</p>", body)
	code, body = get(t, pages, "/demo/app.js")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "<p>page</p>", body)
	code, body = get(t, pages, "/other")
	notFound(t, code, body)
	code, body = get(t, pages, "/healthz")
	require.Equal(t, http.StatusOK, code, "the API is still there: %s", body)

	code, body = get(t, nil, "/")
	notFound(t, code, body)

	for name, bad := range map[string]map[string]http.Handler{
		"conflicts with a route": {"GET /v1/sync": page},
		"invalid pattern":        {"GET /{x": page},
		"no handler":             {"GET /{$}": nil},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(wsTestConfig(env, func(c *Config) { c.Pages = bad }), env.Pool, env.Producer)
			require.ErrorContains(t, err, "gateway: Pages[")
		})
	}
}
