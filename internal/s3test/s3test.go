// Package s3test gives tests a real S3-compatible object store: a
// SeaweedFS server (internal/s3server) started once per test binary, and
// a fresh bucket per test. No mock of S3: the presigned URLs the gateway
// hands out are PUT and GET on the real server. INBOXD_TEST_S3_ENDPOINT
// (with INBOXD_TEST_S3_ACCESS_KEY and INBOXD_TEST_S3_SECRET_KEY) names a
// running store to use instead.
package s3test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/internal/s3server"
)

// EnvEndpoint names the variable of an S3 endpoint to use instead of a
// private SeaweedFS.
const EnvEndpoint = "INBOXD_TEST_S3_ENDPOINT"

var (
	mu      sync.Mutex
	shared  *s3server.Server
	own     bool
	started error
	buckets atomic.Int64
)

// Run is for a TestMain: it runs the tests and stops the server they
// started, if any: func TestMain(m *testing.M) { os.Exit(s3test.Run(m.Run)) }.
// A package that also needs PostgreSQL wraps pgtest.Run around it.
func Run(run func() int) int {
	code := run()
	mu.Lock()
	defer mu.Unlock()
	if shared != nil && own {
		shared.Stop()
	}
	return code
}

// Store returns an S3Store on a fresh bucket of the shared server, and
// the server.
func Store(t testing.TB) (*attachments.S3Store, *s3server.Server) {
	t.Helper()
	srv := Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bucket := fmt.Sprintf("t%d-%d", os.Getpid(), buckets.Add(1))
	st, err := attachments.NewS3(ctx, attachments.S3Config{Endpoint: srv.Endpoint, Bucket: bucket,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		t.Fatalf("s3test: bucket %s: %v", bucket, err)
	}
	t.Cleanup(st.Close)
	return st, srv
}

// Shared returns the test binary's store, starting it on first use.
func Shared(t testing.TB) *s3server.Server {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if shared == nil && started == nil {
		if ep := os.Getenv(EnvEndpoint); ep != "" {
			shared = &s3server.Server{Endpoint: ep, AccessKey: os.Getenv("INBOXD_TEST_S3_ACCESS_KEY"),
				SecretKey: os.Getenv("INBOXD_TEST_S3_SECRET_KEY")}
		} else {
			shared, started = s3server.Start()
			own = started == nil
		}
	}
	if started != nil {
		t.Fatalf("s3test: %v", started)
	}
	return shared
}
