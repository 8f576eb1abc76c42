// Package pgtest gives tests a real PostgreSQL: a fresh, migrated database per
// test, cloned from a template. Each test binary starts a private server
// from the local PostgreSQL binaries (make test starts none: every package
// brings its own), unless INBOXD_TEST_DATABASE_URL names one to use
// instead (a developer's running server, for a quicker loop).
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/pgserver"
	"github.com/inboxd/inboxd/migrations"
)

// EnvUnit names the variable that, when not empty, skips every test that
// needs a PostgreSQL server or an inboxd process (SkipIfUnit): the quick
// loop of make check.
const EnvUnit = "INBOXD_TEST_UNIT"

// SkipIfUnit skips t when EnvUnit is set: t needs a PostgreSQL server
// or an inboxd process, which the quick loop does not start.
func SkipIfUnit(t testing.TB) {
	t.Helper()
	if os.Getenv(EnvUnit) != "" {
		t.Skip("needs PostgreSQL or an inboxd process (" + EnvUnit + " is set: make check)")
	}
}

// EnvURL names the variable holding an admin URL of a test server.
const EnvURL = "INBOXD_TEST_DATABASE_URL"

var (
	mu       sync.Mutex
	adminURL string
	server   *pgserver.Server
	tmpDir   string
	template string
	counter  atomic.Int64
)

// Main runs the package's tests and stops a server that it started.
// Use it as TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main for a TestMain with more to set up and tear down: it runs the
// tests, stops a server that it started and returns the exit code.
func Run(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	if server != nil {
		_ = server.Stop()
		_ = os.RemoveAll(tmpDir)
	}
	mu.Unlock()
	return code
}

// StartServer starts a private server in a temporary directory, stopped at
// the test's end. Tests that stop and start PostgreSQL use their own.
func StartServer(t testing.TB) *pgserver.Server {
	t.Helper()
	SkipIfUnit(t)
	dir, err := os.MkdirTemp("", "inboxd-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s, err := pgserver.Start(context.Background(), pgserver.Config{Dir: filepath.Join(dir, "pg"), Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(); _ = os.RemoveAll(dir) })
	return s
}

func admin(t testing.TB) string {
	t.Helper()
	SkipIfUnit(t)
	mu.Lock()
	defer mu.Unlock()
	if adminURL != "" {
		return adminURL
	}
	if u := os.Getenv(EnvURL); u != "" {
		adminURL = u
	} else {
		dir, err := os.MkdirTemp("", "inboxd-pg-")
		if err != nil {
			t.Fatal(err)
		}
		s, err := pgserver.Start(context.Background(), pgserver.Config{Dir: filepath.Join(dir, "pg"), Fast: true})
		if err != nil {
			t.Fatal(err)
		}
		server, tmpDir, adminURL = s, dir, s.URL
	}
	// A migrated template per test binary, so each test's database is a copy.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	template = fmt.Sprintf("inboxd_tpl_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+template); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, WithDB(adminURL, template))
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	return adminURL
}

// WithDB returns u with its database replaced by db.
func WithDB(u, db string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.Path = "/" + db
	return p.String()
}

// NewDatabase creates a fresh migrated database and returns its URL; it is
// dropped at the test's end.
func NewDatabase(t testing.TB) string {
	t.Helper()
	a := admin(t)
	name := fmt.Sprintf("inboxd_t_%d_%d", os.Getpid(), counter.Add(1))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, template)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, a)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return WithDB(a, name)
}

// NewPool is NewDatabase with an open pool, closed at the test's end.
func NewPool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	u := NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, u
}

// NewDatabaseOn creates and migrates a fresh database on the server at
// adminURL (a server the test started itself) and returns its URL.
func NewDatabaseOn(t testing.TB, adminURL string) string {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("inboxd_t_%d_%d", os.Getpid(), counter.Add(1))
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	u := WithDB(adminURL, name)
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return u
}

// AdminURL returns the URL of the test server's admin database (for code
// that creates databases of its own).
func AdminURL(t testing.TB) string {
	t.Helper()
	return admin(t)
}
