package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/app"
)

// The dev receiver's URL from the gateway's address: an unspecified host
// is reached on the loopback.
func TestDevWebhookURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080/dev/notifications",
		":8080":          "http://127.0.0.1:8080/dev/notifications",
		"0.0.0.0:9":      "http://127.0.0.1:9/dev/notifications",
		"[::]:9":         "http://[::1]:9/dev/notifications",
		"localhost:9":    "http://localhost:9/dev/notifications",
	} {
		require.Equal(t, want, app.DevWebhookURL(addr), addr)
	}
}
