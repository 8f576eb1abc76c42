package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/notifier"
)

// inboxd tail --notifications: the push notifications dev's own webhook
// receiver got (GET /v1/dev/notifications), printed as they come, so that
// the notifier can be watched with no phone. Dev mode only: elsewhere the
// list does not exist and the command says so.

// notifyPollInterval is how often tail --notifications asks for new ones.
const notifyPollInterval = 500 * time.Millisecond

// baseURL is the gateway URL of --url, else of the saved login, else the
// default; no token is needed to read dev's list.
func (f *clientFlags) baseURL() string {
	if f.url != "" {
		return f.url
	}
	if l, _, err := f.session(); err == nil {
		return l.URL
	}
	return defaultClientURL
}

// tailNotifications prints what dev's receiver has (of user, 0: everyone)
// and then, unless once, what it gets, until ctx ends.
func tailNotifications(ctx context.Context, f *clientFlags, user int64, once bool) error {
	base := strings.TrimRight(f.baseURL(), "/")
	hc := &http.Client{Timeout: 10 * time.Second}
	var after int64
	failing := false
	for {
		list, err := fetchNotifications(ctx, hc, base, after, user)
		switch {
		case err == nil:
			if failing {
				fmt.Fprintln(os.Stderr, "-- connected again")
				failing = false
			}
			for _, e := range list.Notifications {
				if err := printNotification(os.Stdout, e, f.jsonOut); err != nil {
					return err
				}
			}
			after = list.Next
		case ctx.Err() != nil:
			return nil
		case once || isPermanentFetch(err):
			return err
		case !failing:
			fmt.Fprintf(os.Stderr, "-- %v; retrying\n", err)
			failing = true
		}
		if once {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(notifyPollInterval):
		}
	}
}

// notDevError is a 404 of the list: the server is not in dev mode.
type notDevError struct{ url string }

func (e notDevError) Error() string {
	return "no notifications list at " + e.url + " (404): it exists in inboxd dev only, whose notifier delivers to its own receiver"
}

func isPermanentFetch(err error) bool {
	_, ok := err.(notDevError)
	return ok
}

// fetchNotifications asks dev's list for the notifications after after.
func fetchNotifications(ctx context.Context, hc *http.Client, base string, after, user int64) (notifier.DevList, error) {
	var list notifier.DevList
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if user != 0 {
		q.Set("user_id", strconv.FormatInt(user, 10))
	}
	u := base + app.DevNotificationsPath + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return list, err
	}
	res, err := hc.Do(req)
	if err != nil {
		return list, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return list, err
	}
	switch {
	case res.StatusCode == http.StatusNotFound:
		return list, notDevError{base + app.DevNotificationsPath}
	case res.StatusCode != http.StatusOK:
		return list, fmt.Errorf("GET %s: %s: %s", app.DevNotificationsPath, res.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return list, fmt.Errorf("GET %s: %w", app.DevNotificationsPath, err)
	}
	return list, nil
}

// printNotification prints e as a line for people or as one JSON object.
func printNotification(w io.Writer, e notifier.Entry, asJSON bool) error {
	if asJSON {
		return printJSON(w, e)
	}
	line := notificationLine(e.Notification)
	if r := e.Report; r != nil {
		line = fmt.Sprintf("-> report %s: conv %d #%d from user %d, reported by user %d: %s %q",
			r.ID, r.ConversationID, r.Seq, r.SenderID, r.ReporterID, r.Reason, r.Note)
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// notificationLine is one notification for people:
// -> user 2: conv 4 #17 (3 messages) from user 7: "preview" badge 5 [mention]
func notificationLine(n notifier.Webhook) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-> user %d: conv %d #%d", n.UserID, n.ConversationID, n.Seq)
	if n.Count > 1 {
		fmt.Fprintf(&b, " (%d messages)", n.Count)
	}
	fmt.Fprintf(&b, " from user %d: %q badge %d", n.SenderID, n.Preview, n.Badge)
	if n.Reason == notifier.ReasonMention {
		b.WriteString(" [mention]")
	}
	return b.String()
}
