package client

import (
	"context"
	"errors"
	"time"
)

// errTryWebSocket ends a long-poll session of TransportAuto when its
// PollingPeriod is over: not a failure, the WebSocket gets another try.
var errTryWebSocket = errors.New("client: polling period over, trying the WebSocket again")

// defaultPollInterval is used when an answer has no _polling hint.
const defaultPollInterval = time.Second

// runPoll long-polls GET /v1/sync until it fails, ctx ends, or until (if
// not zero) passes. up is called at the first answer.
//
// Requests start at least _polling.next_interval_ms apart (jittered by
// ±10%): a long-poll that was held for its wait starts the next at once, an
// answer that came back at once (entries) waits out the interval, so the
// server's hint bounds the request rate without adding latency to an idle
// inbox. Pages of a catch-up (has_more) follow each other at once.
func (c *Client) runPoll(ctx context.Context, up func(), until time.Time, rnd func(time.Duration) time.Duration) error {
	seq := newSequencer(c)
	var etag string
	var next time.Time
	first := true
	for {
		if !until.IsZero() && time.Now().After(until) {
			return errTryWebSocket
		}
		if !sleepCtx(ctx, time.Until(next)) {
			return ctx.Err()
		}
		start := time.Now()
		// The first request of a session answers at once: it tells that
		// the server is reachable (up) and catches up without a hold.
		req := c.syncRequestAt(!first)
		req.etag = etag
		ans, tag, notModified, err := c.api.sync(ctx, req)
		if err != nil {
			return err
		}
		if first {
			first = false
			up()
		}
		if ans != nil {
			c.noteCounts(ans.Counts)
		}
		if ans != nil && ans.Polling != nil && ans.Polling.Reconnect != nil {
			c.noteReconnect(ans.Polling.Reconnect) // the crash hint, as a welcome's
		}
		interval := defaultPollInterval
		if ans != nil && ans.Polling != nil && ans.Polling.NextIntervalMS > 0 {
			interval = time.Duration(ans.Polling.NextIntervalMS) * time.Millisecond
		}
		next = start.Add(interval - interval/10 + rnd(interval/5))
		switch {
		case notModified:
			continue
		case ans.TooLong:
			etag = ""
			seq.reset()
			if err := c.applyTooLong(ctx, ans); err != nil {
				return err
			}
			if err := c.largeAnswer(ctx, ans.Large); err != nil {
				return err
			}
			next = time.Time{}
			continue
		}
		c.noteEpoch(ans.Epoch)
		c.noteLarge(ans.Large)
		gapped, err := seq.offer(ctx, ans.Entries)
		if err != nil {
			return err
		}
		if err := c.catchUpLarge(ctx, ans.Large); err != nil {
			return err
		}
		if gapped {
			seq.reset()
			return errInconsistent
		}
		etag = tag
		if ans.HasMore {
			next = time.Time{}
		}
	}
}
