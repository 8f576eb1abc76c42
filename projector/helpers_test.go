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

// dumpRows runs each of queries (one text column each) on pool and
// returns their rows by the query's name: a projection as text, to
// compare.
func dumpRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, queries map[string]string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for name, q := range queries {
		rows, err := pool.Query(ctx, q)
		require.NoError(t, err)
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out[name] = append(out[name], s)
		}
		require.NoError(t, rows.Err())
	}
	return out
}

// projectedAlike projects log on fresh databases in batches of 1, 2, 5
// and all its records (a live fanout, a replay), requires every invariant
// to hold and dump to read the same after each cut, and returns that
// dump.
func projectedAlike(t *testing.T, log []*events.Event,
	dump func(*testing.T, context.Context, *pgxpool.Pool) map[string][]string) map[string][]string {
	t.Helper()
	ctx := context.Background()
	var dumps []map[string][]string
	for _, n := range []int{1, 2, 5, len(log)} {
		pool, _ := pgtest.NewPool(t)
		applyLog(t, ctx, pool, log, n)
		requireVerified(t, pool)
		dumps = append(dumps, dump(t, ctx, pool))
	}
	for i := 1; i < len(dumps); i++ {
		require.Equal(t, dumps[0], dumps[i], "batch cut %d projects what one record at a time does", i)
	}
	return dumps[0]
}
