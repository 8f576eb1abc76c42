package projector_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/projector"
)

// ApplyIsolating (replay's apply): a batch of 40 sends with one the
// database refuses for its own body projects the other 39 in order, with
// no hole in the conversation's seqs, reports the one record to
// deadLetter and stores it as a dead_letter rejection; a failure that a
// copy of the record hits too is returned instead of being dropped.
func TestApplyIsolatingSkipsOnlyTheBadRecord(t *testing.T) {
	ctx := context.Background()
	pool, p := newProjector(t, projector.Config{})
	recs := []projector.Record{{Partition: 0, Offset: 0, Event: created(1, 10, 11)}}
	var bad *events.Event
	for i := 1; i <= 40; i++ {
		e := sent(1, 10, "fine")
		if i == 23 {
			e.Body, bad = events.Ptr("refused-by-the-database"), e
		}
		recs = append(recs, projector.Record{Partition: 0, Offset: int64(i), Event: e})
	}
	refuseBodies(t, pool)

	var dead []projector.Record
	_, err := p.ApplyIsolating(ctx, recs, func(r projector.Record, cause error) error {
		require.Equal(t, projector.DataError, projector.Classify(cause))
		dead = append(dead, r)
		return nil
	})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, int64(23), dead[0].Offset)
	var last, next int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT last_seq FROM conversations WHERE id = 1`).Scan(&last))
	require.EqualValues(t, 40, last, "created + 39 sends, no hole")
	require.NoError(t, pool.QueryRow(ctx, `SELECT next_offset FROM consumer_offsets WHERE topic = 't'`).Scan(&next))
	require.EqualValues(t, 41, next)
	var reason string
	require.NoError(t, pool.QueryRow(ctx, `SELECT reason FROM rejections WHERE msg_id = $1`, bad.MsgID).Scan(&reason))
	require.Equal(t, projection.ReasonDeadLetter, reason)
	requireVerified(t, pool)

	// Every message refused: the probe fails too, nothing is dropped.
	_, err = pool.Exec(ctx, `ALTER TABLE messages ADD CONSTRAINT none CHECK (kind <> 'text') NOT VALID`)
	require.NoError(t, err)
	_, err = p.ApplyIsolating(ctx, []projector.Record{{Partition: 0, Offset: 41, Event: sent(1, 10, "fine")}}, func(projector.Record, error) error {
		t.Fatal("a record whose copy fails too must not be dead-lettered")
		return nil
	})
	require.Error(t, err)
	require.NoError(t, pool.QueryRow(ctx, `SELECT next_offset FROM consumer_offsets WHERE topic = 't'`).Scan(&next))
	require.EqualValues(t, 41, next, "the offset did not move")
}

// A record refused until an operator mends the database, and probed after
// the mend, is not poison: Probe says so (ErrHealed) instead of letting it
// be dead-lettered, and ApplyIsolating projects it. Before the mend, the
// same probe confirms the record's own data as the cause.
func TestProbeOfAMendedDatabaseKeepsTheRecord(t *testing.T) {
	ctx := context.Background()
	pool, p := newProjector(t, projector.Config{})
	_, err := p.Apply(ctx, []projector.Record{{Partition: 0, Offset: 0, Event: created(1, 10, 11)}})
	require.NoError(t, err)
	refuseBodies(t, pool)
	rec := projector.Record{Partition: 0, Offset: 1, Event: sent(1, 10, "refused until mended")}
	_, err = p.Apply(ctx, []projector.Record{rec})
	require.Equal(t, projector.DataError, projector.Classify(err))
	require.NoError(t, p.Probe(ctx, rec), "the copy applies and the record still fails: its own data")

	_, err = pool.Exec(ctx, `ALTER TABLE messages DROP CONSTRAINT no_refused`)
	require.NoError(t, err)
	err = p.Probe(ctx, rec)
	require.ErrorIs(t, err, projector.ErrHealed)
	require.Equal(t, projector.Transient, projector.Classify(err))
	_, err = p.ApplyIsolating(ctx, []projector.Record{rec}, func(projector.Record, error) error {
		t.Fatal("a record that applies must not be dead-lettered")
		return nil
	})
	require.NoError(t, err)
	var last int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT last_seq FROM conversations WHERE id = 1`).Scan(&last))
	require.EqualValues(t, 2, last, "created + the mended send")
	requireVerified(t, pool)
}

// refuseBodies makes the database refuse every message whose body starts
// with "refused" (constraint no_refused, dropped to mend it).
func refuseBodies(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `ALTER TABLE messages ADD CONSTRAINT no_refused CHECK (body NOT LIKE 'refused%')`)
	require.NoError(t, err)
}
