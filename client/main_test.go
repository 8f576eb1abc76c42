package client_test

import (
	"fmt"
	"log"
	"os"
	"sync"
	"testing"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/s3test"
	"github.com/inboxd/inboxd/internal/testenv"
)

// The tests run against gateways of their own (newWorld); the examples run
// against a real dev gateway, `inboxd dev` on free ports, as an app
// developer's would be. It is started by the first example that asks for
// it (so that a run of tests alone does not pay for it), shared by the
// examples, and stopped after the last one.

// devGateway is the examples' dev gateway. Its too_long lag is 20 instead
// of 500, so that ExampleHandler_tooLong needs 30 messages, not 500.
var devGateway struct {
	once sync.Once
	dev  *testenv.Dev
	err  error
}

// gatewayURL is the base URL of the examples' dev gateway.
func gatewayURL() string {
	devGateway.once.Do(func() {
		devGateway.dev, devGateway.err = testenv.StartDev("--too-long-lag", "20", "--ack-wait", "10s")
	})
	if devGateway.err != nil {
		log.Fatalf("the examples' dev gateway: %v", devGateway.err)
	}
	return devGateway.dev.URL
}

func TestMain(m *testing.M) {
	code := s3test.Run(func() int { return pgtest.Run(m) })
	if d := devGateway.dev; d != nil {
		if err := d.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = max(code, 1)
		}
	}
	os.Exit(code)
}
