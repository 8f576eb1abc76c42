package app

import (
	"net"
	"net/http"

	"github.com/inboxd/inboxd/notifier"
)

// Dev's own webhook receiver (docs/notifications.md, "Seeing it work"):
// `inboxd dev` mounts a notifier.DevReceiver beside the API, and its
// notifier delivers to it, so that notifications can be watched with
// `inboxd tail --notifications` and no phone.

const (
	// DevWebhookSecret is the fixed, well-known secret dev's notifier signs
	// with and its receiver checks (never use it anywhere else).
	DevWebhookSecret = "inboxd-dev-webhook-secret"
	// DevWebhookPath is where dev's receiver takes deliveries (POST).
	DevWebhookPath = "/dev/notifications"
	// DevNotificationsPath lists what it got (GET ?after=N&user_id=U).
	DevNotificationsPath = "/v1/dev/notifications"
)

// DevWebhookURL is the URL of dev's receiver served on the gateway's
// httpAddr: an address without a host, or with an unspecified one
// (":8080", "0.0.0.0:8080"), is reached on the loopback.
func DevWebhookURL(httpAddr string) string {
	host, port, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return "http://" + httpAddr + DevWebhookPath
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port) + DevWebhookPath
}

// DevNotificationPages are the routes of rcv to add to the gateway's
// Pages in dev mode only (elsewhere they do not exist: 404).
func DevNotificationPages(rcv *notifier.DevReceiver) map[string]http.Handler {
	return map[string]http.Handler{
		"POST " + DevWebhookPath:      rcv,
		"GET " + DevNotificationsPath: rcv.ListHandler(),
	}
}
