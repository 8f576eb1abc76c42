package projector_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/projector"
)

// newProjector returns a fresh database and a projector of topic "t" on
// it, configured by cfg (its Topic is set).
func newProjector(t *testing.T, cfg projector.Config) (*pgxpool.Pool, *projector.Projector) {
	t.Helper()
	pool, _ := pgtest.NewPool(t)
	cfg.Topic = "t"
	p, err := projector.New(cfg, pool)
	require.NoError(t, err)
	return pool, p
}

// sent is a message.sent of body by sender to conversation conv.
func sent(conv, sender int64, body string) *events.Event {
	e := events.New(events.MessageSent, conv, sender)
	e.MsgID, e.Body = uuid.NewString(), &body
	return e
}

// created is the creation of conversation conv by creator with members.
func created(conv, creator int64, members ...int64) *events.Event {
	e := events.New(events.ConversationCreated, conv, creator)
	e.Title, e.Members = "c", members
	return e
}

// requireVerified checks every invariant of the projection in pool.
func requireVerified(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	rep, err := projector.Verify(context.Background(), pool)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep)
}
