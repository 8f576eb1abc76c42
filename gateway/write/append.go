package write

import (
	"context"
	"errors"
	"time"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/producer"
)

// Appender appends the gateway's events to the log, each within a
// timeout. It is safe for concurrent use.
type Appender struct {
	prod    *producer.Producer
	timeout time.Duration
}

// NewAppender appends through prod; every append (or group of appends)
// gives up after timeout (the gateway's Config.AppendTimeout).
func NewAppender(prod *producer.Producer, timeout time.Duration) *Appender {
	return &Appender{prod: prod, timeout: timeout}
}

// Append appends e within the timeout; a failure is a retryable 503.
func (a *Appender) Append(ctx context.Context, e *events.Event) error {
	actx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	if _, err := a.prod.Append(actx, e); err != nil {
		if ctx.Err() != nil {
			return apierr.ErrClientGone
		}
		if errors.Is(err, events.ErrInvalid) {
			return err
		}
		return apierr.Unavailable("appending to the log failed, try again", time.Second, err)
	}
	return nil
}

// AppendAll appends es within the timeout, all handed to the
// producer at once so that its client batches them (one produce request
// per partition, not one round trip per event), and waits for all. They
// share a conversation, hence a partition: they are appended in order. A
// failure is a retryable 503 (events appended before it stay appended;
// a retry appends them again, which the projection absorbs: adding a
// member twice changes nothing).
func (a *Appender) AppendAll(ctx context.Context, es []*events.Event) error {
	if len(es) == 1 {
		return a.Append(ctx, es[0])
	}
	actx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	errs := make(chan error, len(es))
	for _, e := range es {
		a.prod.AppendAsync(actx, e, func(_ producer.Position, err error) { errs <- err })
	}
	var first error
	for range es {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	switch {
	case first == nil:
		return nil
	case ctx.Err() != nil:
		return apierr.ErrClientGone
	case errors.Is(first, events.ErrInvalid):
		return first
	}
	return apierr.Unavailable("appending to the log failed, try again", time.Second, first)
}
