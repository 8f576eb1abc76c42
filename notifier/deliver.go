package notifier

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/projection"
)

// Delivery: a dispatcher claims due notifications (SKIP LOCKED, so several
// notifiers share them) and hands them to the workers, which check that
// the member is still not connected, build the body and call the webhook.

// claimed is a claimed notification.
type claimed struct {
	id                     string
	user, conv             int64
	firstSeq, lastSeq      int64
	count                  int
	sender                 int64
	mention                bool
	committedAt, createdAt time.Time
	attempts               int
	kind                   string // kindMessage or kindReport
}

// The kinds of notifications (notifications.kind).
const (
	kindMessage = "message"
	kindReport  = "report"
)

// sqlClaim claims up to $2 due notifications for $1 ms (their attempt
// counts up): the oldest due first, and none of a user and conversation
// whose earlier notification is still being retried (it goes first; the
// later one waits, collecting the messages that come meanwhile).
const sqlClaim = `UPDATE notifications n SET claimed_until = now() + $1 * interval '1 millisecond', attempts = n.attempts + 1
FROM (SELECT x.id FROM notifications x
	WHERE x.state = 'pending' AND x.due_at <= now() AND (x.claimed_until IS NULL OR x.claimed_until < now())
		AND NOT EXISTS (SELECT 1 FROM notifications o WHERE o.user_id = x.user_id AND o.conversation_id = x.conversation_id
			AND o.kind = x.kind AND o.state = 'pending' AND o.attempts > 0 AND o.id <> x.id AND o.created_at < x.created_at)
	ORDER BY x.due_at LIMIT $2 FOR UPDATE SKIP LOCKED) c
WHERE n.id = c.id
RETURNING n.id::text, n.user_id, n.conversation_id, n.first_seq, n.last_seq, n.count, n.sender_id, n.mention,
	n.committed_at, n.created_at, n.attempts, n.kind`

// sqlSkipConnected settles, in one statement, the due notifications of
// members connected to a live gateway (most of them, in a busy system):
// they are skipped without a worker. $1 is the presence expiry in ms.
const sqlSkipConnected = `WITH s AS (UPDATE notifications n SET state = 'skipped', done_at = now(), claimed_until = NULL
	WHERE n.state = 'pending' AND n.kind = 'message' AND n.due_at <= now() AND (n.claimed_until IS NULL OR n.claimed_until < now())
		AND EXISTS (SELECT 1 FROM connections c JOIN presence_gateways g ON g.gateway_id = c.gateway_id
			WHERE c.user_id = n.user_id AND g.heartbeat_at > now() - $1 * interval '1 millisecond')
	RETURNING 1)
SELECT count(*) FROM s`

// skipConnected runs sqlSkipConnected.
func (n *Notifier) skipConnected(ctx context.Context) {
	var skipped int64
	var err error
	if n.sharded() {
		skipped, err = n.skipConnectedApart(ctx)
	} else {
		err = n.pool.QueryRow(ctx, sqlSkipConnected, n.cfg.PresenceExpiry.Milliseconds()).Scan(&skipped)
	}
	if err != nil {
		if ctx.Err() == nil {
			n.cfg.Logger.Warn("skipping the notifications of connected members failed", "err", err)
		}
		return
	}
	n.m.outcomes.WithLabelValues(OutcomeSkippedConnected).Add(float64(skipped))
}

// dispatch settles the notifications of connected members, claims due
// ones while workers are free and hands them over; with nothing due it
// looks again every 50 ms.
func (n *Notifier) dispatch(ctx context.Context) error {
	work := make(chan claimed)
	done := make(chan struct{}, n.cfg.Workers)
	var wg sync.WaitGroup
	for range n.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				n.deliver(ctx, c)
				done <- struct{}{}
			}
		}()
	}
	defer wg.Wait()
	defer close(work)
	free := n.cfg.Workers
	for {
		for {
			select {
			case <-done:
				free++
				continue
			default:
			}
			break
		}
		var got []claimed
		n.skipConnected(ctx)
		if free > 0 {
			var err error
			if got, err = n.claim(ctx, free); err != nil && ctx.Err() == nil {
				n.cfg.Logger.Warn("claiming notifications failed", "err", err)
			}
		}
		for _, c := range got {
			work <- c
			free--
		}
		if len(got) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-done:
			free++
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (n *Notifier) claim(ctx context.Context, max int) ([]claimed, error) {
	rows, err := n.pool.Query(ctx, sqlClaim, (2 * n.cfg.Timeout).Milliseconds(), max)
	if err != nil {
		return nil, err
	}
	var out []claimed
	var c claimed
	_, err = pgx.ForEachRow(rows, []any{&c.id, &c.user, &c.conv, &c.firstSeq, &c.lastSeq, &c.count, &c.sender, &c.mention,
		&c.committedAt, &c.createdAt, &c.attempts, &c.kind}, func() error {
		out = append(out, c)
		return nil
	})
	return out, err
}

// sqlPrepare reads what a due notification needs: whether the member is
// connected to a live gateway, the newest message (preview, deleted), the
// member's inbox_seq of it and the member's totals (the badge).
var sqlPrepare = `SELECT EXISTS (SELECT 1 FROM connections c JOIN presence_gateways g ON g.gateway_id = c.gateway_id
		WHERE c.user_id = $1 AND g.heartbeat_at > now() - $4 * interval '1 millisecond'),
	m.body, m.deleted,
	COALESCE((SELECT i.inbox_seq FROM inbox i WHERE i.user_id = $1 AND i.conversation_id = $2 AND i.seq = $3 AND i.kind = 1
		ORDER BY i.inbox_seq DESC LIMIT 1), 0),
	t.unread_total, t.mention_total
FROM messages m CROSS JOIN LATERAL (` + projection.CountsSQL("$1", "") + `) t
WHERE m.conversation_id = $2 AND m.seq = $3`

// Final states of a notification, and the SQL that records them.
const (
	sqlFinish = `UPDATE notifications SET state = $2, done_at = now(), claimed_until = NULL, last_error = $3 WHERE id = $1`
	sqlRetry  = `UPDATE notifications SET due_at = now() + $2 * interval '1 millisecond', claimed_until = NULL, last_error = $3 WHERE id = $1`
)

// deliver sends one claimed notification, unless the member is connected
// or its only message was deleted, and records the outcome.
func (n *Notifier) deliver(ctx context.Context, c claimed) {
	if c.kind == kindReport {
		n.deliverReport(ctx, c)
		return
	}
	var connected, deleted bool
	var body string
	var w Webhook
	var err error
	if n.sharded() {
		connected, body, deleted, err = n.prepareApart(ctx, c, &w)
	} else {
		err = n.pool.QueryRow(ctx, sqlPrepare, c.user, c.conv, c.lastSeq, n.cfg.PresenceExpiry.Milliseconds()).Scan(
			&connected, &body, &deleted, &w.InboxSeq, &w.Badge, &w.Mentions)
	}
	switch {
	case err != nil:
		n.retry(ctx, c, 0, fmt.Sprintf("prepare: %v", err))
		return
	case connected:
		n.finish(ctx, c, "skipped", OutcomeSkippedConnected, "")
		return
	case deleted && c.count == 1:
		n.finish(ctx, c, "skipped", OutcomeSkippedDeleted, "")
		return
	}
	w.Type, w.ID, w.UserID, w.ConversationID, w.Seq, w.FirstSeq, w.Count = TypeMessage, c.id, c.user, c.conv, c.lastSeq, c.firstSeq, c.count
	w.SenderID, w.CreatedAt, w.Reason = c.sender, c.createdAt.UTC(), ReasonMessage
	if c.mention {
		w.Reason = ReasonMention
	}
	if !deleted {
		w.Preview = cut(body, n.cfg.Preview)
	}
	status, retryAfter, err := n.post(ctx, w.ID, &w)
	n.settle(ctx, c, status, retryAfter, err)
}

// sqlReport reads a report's body (the notification's id is the
// report's).
const sqlReport = `SELECT conversation_id, seq, msg_id::text, sender_id, reporter_id, reason, note, created_at
FROM reports WHERE id = $1`

// deliverReport sends the notification of a report: never skipped, since
// it is for the moderators, not a member.
func (n *Notifier) deliverReport(ctx context.Context, c claimed) {
	w := ReportWebhook{Type: TypeReport, ID: c.id}
	if err := n.pool.QueryRow(ctx, sqlReport, c.id).Scan(&w.ConversationID, &w.Seq, &w.MsgID, &w.SenderID, &w.ReporterID,
		&w.Reason, &w.Note, &w.CreatedAt); err != nil {
		n.retry(ctx, c, 0, fmt.Sprintf("prepare: %v", err))
		return
	}
	w.CreatedAt = w.CreatedAt.UTC()
	status, retryAfter, err := n.post(ctx, w.ID, &w)
	n.settle(ctx, c, status, retryAfter, err)
}

// settle records the outcome of a webhook call for c: sent on a 2xx,
// dead on another 4xx but 429, else a retry.
func (n *Notifier) settle(ctx context.Context, c claimed, status int, retryAfter time.Duration, err error) {
	switch {
	case err == nil && status/100 == 2:
		n.m.latency.Observe(time.Since(c.committedAt).Seconds())
		n.finish(ctx, c, "sent", OutcomeSent, "")
	case err == nil && status != http.StatusTooManyRequests && status/100 == 4:
		n.finish(ctx, c, "dead", OutcomeDead, "refused by the receiver: "+strconv.Itoa(status))
	case err != nil:
		n.retry(ctx, c, 0, err.Error())
	default:
		n.retry(ctx, c, retryAfter, "answered "+strconv.Itoa(status))
	}
}

// post calls the webhook with w (a body of id), signed; it returns the
// status and the receiver's Retry-After.
func (n *Notifier) post(ctx context.Context, id string, w any) (int, time.Duration, error) {
	body, err := json.Marshal(w)
	if err != nil {
		return 0, 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, n.cfg.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "inboxd-notifier/1")
	req.Header.Set(HeaderIdempotency, id)
	req.Header.Set(HeaderSignature, Sign(n.cfg.WebhookSecret, time.Now(), body))
	start := time.Now()
	resp, err := n.cfg.HTTPClient.Do(req)
	n.m.webhook.Observe(time.Since(start).Seconds())
	if err != nil {
		return 0, 0, fmt.Errorf("webhook: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, retryAfter(resp.Header.Get("Retry-After")), nil
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}

// retry schedules the next attempt of c after the backoff of its attempts
// (jittered, exponential), or the receiver's Retry-After when longer; past
// MaxAttempts or MaxAge it is dead.
func (n *Notifier) retry(ctx context.Context, c claimed, after time.Duration, why string) {
	if c.attempts >= n.cfg.MaxAttempts || time.Since(c.createdAt) > n.cfg.MaxAge {
		n.finish(ctx, c, "dead", OutcomeDead, why)
		return
	}
	d := retryDelay(c.attempts, after)
	n.m.outcomes.WithLabelValues(OutcomeRetried).Inc()
	if _, err := n.pool.Exec(context.WithoutCancel(ctx), sqlRetry, c.id, d.Milliseconds(), why); err != nil {
		n.cfg.Logger.Warn("scheduling a retry failed; the claim expires instead", "id", c.id, "err", err)
	}
}

// finish records a final state of c.
func (n *Notifier) finish(ctx context.Context, c claimed, state, outcome, why string) {
	var reason *string
	if why != "" {
		reason = &why
	}
	if _, err := n.pool.Exec(context.WithoutCancel(ctx), sqlFinish, c.id, state, reason); err != nil {
		n.cfg.Logger.Warn("recording a notification's outcome failed; it may be sent again (same id)", "id", c.id, "err", err)
		return
	}
	n.m.outcomes.WithLabelValues(outcome).Inc()
	if outcome == OutcomeDead {
		n.cfg.Logger.Warn("notification given up", "id", c.id, "user_id", c.user, "conversation_id", c.conv, "reason", why)
	}
}

// retryDelay is the wait after attempt number attempts failed: jittered
// exponential backoff (cenkalti/backoff: ~1 s, 2 s, 4 s, ... up to 5 min,
// each ±50 %), or after (the receiver's Retry-After) when longer.
func retryDelay(attempts int, after time.Duration) time.Duration {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.Multiplier, bo.MaxInterval, bo.MaxElapsedTime = time.Second, 2, 5*time.Minute, 0
	bo.Reset()
	var d time.Duration
	for range attempts {
		d = bo.NextBackOff()
	}
	return max(d, after)
}

// cut returns the first max runes of s, with "…" when it was longer.
func cut(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max]) + "…"
}
