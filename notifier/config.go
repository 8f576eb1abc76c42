package notifier

import (
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/events"
)

// Defaults of Config.
const (
	DefaultGroup          = "inboxd-notifier"
	DefaultDelay          = 2 * time.Second
	DefaultWorkers        = 16
	DefaultMaxAttempts    = 12
	DefaultMaxAge         = 24 * time.Hour
	DefaultTimeout        = 10 * time.Second
	DefaultPreview        = 120
	DefaultMaxPending     = 1_000_000
	DefaultPresenceExpiry = 30 * time.Second
	DefaultKeep           = 24 * time.Hour
	DefaultSessionTimeout = 6 * time.Second
)

// Config configures a Notifier. Zero values mean the defaults.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// Topic of the events. Default events.DefaultTopic.
	Topic string
	// Group is the notifier's consumer group: notifier processes with the
	// same group share the partitions (as fanouts do). Its progress is
	// stored in PostgreSQL (notifier_offsets), never committed to Kafka
	// for correctness. Default DefaultGroup.
	Group string
	// SessionTimeout of the group: how long the partitions of a notifier
	// that died wait before another takes them. Default
	// DefaultSessionTimeout (6 s, the brokers' usual minimum).
	SessionTimeout time.Duration
	// InstanceID, when set, makes the process a static member of the group:
	// a restarted process with the same id takes its partitions back at
	// once instead of after SessionTimeout. Unique per process. Default ""
	// (dynamic membership).
	InstanceID string

	// Servers, when set, makes this the notifier of one server of a
	// sharded deployment (see Servers): the pool given to New is that
	// server's. Nil: one server.
	Servers *Servers

	// WebhookURL receives one POST per notification. Required.
	WebhookURL string
	// WebhookSecret signs every body (X-Inboxd-Signature). Required.
	WebhookSecret []byte

	// Delay is how long after the commit of a burst's first message its
	// notification is due: a member with a WebSocket connected to any
	// gateway then is not notified (its device has had the entry pushed),
	// and the messages of the burst decided meanwhile join it. Default
	// DefaultDelay (2 s).
	Delay time.Duration
	// Workers deliver due notifications concurrently. Default
	// DefaultWorkers.
	Workers int
	// MaxAttempts and MaxAge bound the retries of a notification the
	// receiver does not take: past either it is dead (counted, kept for
	// inspection). Default DefaultMaxAttempts (12), DefaultMaxAge (24 h).
	MaxAttempts int
	MaxAge      time.Duration
	// Timeout bounds one webhook call. Default DefaultTimeout (10 s).
	Timeout time.Duration
	// Preview is the most characters (runes) of a message's text in a
	// notification; longer ones are cut and end with "…". Default
	// DefaultPreview (120).
	Preview int
	// Reports posts the reports of messages too (bodies of type
	// "message.reported", docs/notifications.md, "Reports"). Off by
	// default: a receiver written before reports existed gets only the
	// bodies it knows, whatever it does with their type.
	Reports bool

	// MaxPending bounds the notifications waiting (due or being retried):
	// beyond it new ones are dropped, counted, so that a receiver down for
	// long does not grow the table without bound. Default DefaultMaxPending.
	MaxPending int
	// PresenceExpiry is the gateways' presence expiry: a connection row of
	// a gateway whose heartbeat is older does not count. Keep it equal to
	// the gateways' --presence-expiry. Default DefaultPresenceExpiry (30 s).
	PresenceExpiry time.Duration
	// Keep is how long delivered, skipped and dead notifications are kept.
	// Default DefaultKeep (24 h).
	Keep time.Duration

	// HTTPClient makes the webhook calls. Default a client with Timeout.
	HTTPClient *http.Client
	// Registerer receives the metrics (namespace inboxd, subsystem
	// notifier). Default none.
	Registerer prometheus.Registerer
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	set := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	if c.Topic == "" {
		c.Topic = events.DefaultTopic
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	set(&c.Delay, DefaultDelay)
	set(&c.MaxAge, DefaultMaxAge)
	set(&c.Timeout, DefaultTimeout)
	set(&c.PresenceExpiry, DefaultPresenceExpiry)
	set(&c.Keep, DefaultKeep)
	set(&c.SessionTimeout, DefaultSessionTimeout)
	for _, p := range []struct {
		v *int
		d int
	}{{&c.Workers, DefaultWorkers}, {&c.MaxAttempts, DefaultMaxAttempts}, {&c.Preview, DefaultPreview},
		{&c.MaxPending, DefaultMaxPending}} {
		if *p.v == 0 {
			*p.v = p.d
		}
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: c.Timeout}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("notifier: Brokers are required")
	case c.WebhookURL == "":
		return errors.New("notifier: WebhookURL is required")
	case len(c.WebhookSecret) == 0:
		return errors.New("notifier: WebhookSecret is required")
	case c.Delay < 0, c.Workers < 0, c.MaxAttempts < 0, c.MaxAge < 0, c.Timeout < 0, c.Preview < 0, c.MaxPending < 0:
		return errors.New("notifier: negative setting")
	}
	u, err := url.Parse(c.WebhookURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return errors.New("notifier: WebhookURL must be an http(s) URL")
	}
	return nil
}
