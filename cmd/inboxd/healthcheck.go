package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"time"

	"github.com/inboxd/inboxd/internal/config"
)

// runHealthcheck probes an HTTP health endpoint: the images are distroless,
// with no curl, so container health checks call the binary itself.
func runHealthcheck(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:8080/readyz", "endpoint to probe; 2xx is healthy")
	timeout := fs.Duration("timeout", 3*time.Second, "probe timeout")
	fs.Usage = config.Usage(fs, "inboxd healthcheck: exit 0 when the endpoint answers 2xx (for container health checks)")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s: %w", *url, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("probe %s: %s", *url, resp.Status)
	}
	return nil
}
