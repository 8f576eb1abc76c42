package projector_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/projector"
)

// The placement fence: raising it waits for a batch of the old placement
// that is still open, and refuses every later batch of both stages under
// an older version (FencedError, nothing written), while a stage of the
// new version goes on.
func TestPlacementFence(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewPool(t)
	stage := func(version int64) *projector.Projector {
		p, err := projector.New(projector.Config{Topic: eventsTopic, PlacementVersion: version, Users: everyoneElsewhere{}}, pool)
		require.NoError(t, err)
		return p
	}
	old, next := stage(3), stage(4)
	created := events.New(events.ConversationCreated, 1, 10)
	created.Members = []int64{11}
	_, err := old.Apply(ctx, []projector.Record{{Partition: 0, Offset: 0, Event: created}})
	require.NoError(t, err)

	// A batch of version 3 still open holds the fence shared: the raise
	// waits for it.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	send := func(offset int64) []projector.Record {
		e := events.New(events.MessageSent, 1, 10)
		body := "hi"
		e.MsgID, e.Body = uuid.NewString(), &body
		return []projector.Record{{Partition: 0, Offset: offset, Event: e}}
	}
	_, err = old.ApplyTx(ctx, tx, send(1))
	require.NoError(t, err)
	raised := make(chan error, 1)
	go func() { raised <- placement.Fence(ctx, pool, 4) }()
	testenv.WaitFor(t, 10*time.Second, "the raise waits for the open batch", func() bool {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE placement_fence%'`).Scan(&n)
		return n == 1
	})
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-raised)

	var fence *projector.FencedError
	_, err = old.Apply(ctx, send(2))
	require.True(t, errors.As(err, &fence), "%v", err)
	_, err = old.ApplyDeliveries(ctx, []projector.DeliveryRecord{{Partition: 0, Offset: 0, Delivery: &projector.Delivery{Source: 1, Offset: 1,
		Items: []projector.Item{{User: 5, Conv: 9, Kind: 1, Seq: 1, At: time.Now()}}}}})
	require.True(t, errors.As(err, &fence), "%v", err)
	var inbox, next2 int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE user_id = 5`).Scan(&inbox))
	require.Zero(t, inbox, "the fenced user stage wrote nothing")
	require.NoError(t, pool.QueryRow(ctx, `SELECT next_offset FROM consumer_offsets WHERE topic = $1 AND "partition" = 0`, eventsTopic).Scan(&next2))
	require.EqualValues(t, 2, next2, "the fenced batch did not move the offset")

	res, err := next.Apply(ctx, send(2))
	require.NoError(t, err)
	require.Equal(t, 1, res.Messages)
	// A lower raise changes nothing.
	require.NoError(t, placement.Fence(ctx, pool, 2))
	_, err = next.Apply(ctx, send(3))
	require.NoError(t, err)
}
