package projector_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/projector"
)

// TestVerifySearchIndex: the search index follows a message's body
// through an edit and a delete, and X1 fails when an index is not what
// the body gives (here: the configuration changed under stored rows, as
// a switch of configuration that did not recompute them would leave it).
func TestVerifySearchIndex(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewPool(t)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var log []*events.Event
	add := func(e *events.Event) {
		e.At = t0.Add(time.Duration(len(log)) * time.Second)
		log = append(log, e)
	}
	c := events.New(events.ConversationCreated, 1, 10)
	c.Members = []int64{11}
	add(c)
	ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
	for i, body := range []string{"running dogs", "a cat sleeping", "gone soon"} {
		e := events.New(events.MessageSent, 1, 10)
		e.MsgID, e.Body = ids[i], events.Ptr(body)
		add(e)
	}
	edit := events.New(events.MessageEdited, 1, 10)
	edit.Seq, edit.ChangeID, edit.Body = 3, uuid.NewString(), events.Ptr("a bird singing")
	add(edit)
	del := events.New(events.MessageDeleted, 1, 10)
	del.Seq, del.ChangeID = 4, uuid.NewString()
	add(del)
	applyLog(t, ctx, pool, log, 1)
	requireVerified(t, pool)

	found := func(q string) []int64 {
		rows, err := pool.Query(ctx, `SELECT seq FROM messages WHERE search_vector @@ plainto_tsquery(inboxd_search.config(), $1) ORDER BY seq`, q)
		require.NoError(t, err)
		var seqs []int64
		for rows.Next() {
			var s int64
			require.NoError(t, rows.Scan(&s))
			seqs = append(seqs, s)
		}
		require.NoError(t, rows.Err())
		return seqs
	}
	require.Equal(t, []int64{2}, found("running"))
	require.Empty(t, found("cat"), "an edit replaces the indexed text")
	require.Equal(t, []int64{3}, found("bird"))
	require.Empty(t, found("gone"), "a deleted message is not indexed")

	// A connection of its own: the pool's have cached the checks' plans,
	// with the configuration folded in (verify is a process of its own).
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `CREATE OR REPLACE FUNCTION inboxd_search.config() RETURNS regconfig
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 'english'::regconfig $$`)
	require.NoError(t, err)
	rep, err := projector.Verify(ctx, tx)
	require.NoError(t, err)
	var failed []string
	for _, c := range rep.Checks {
		if c.Violations > 0 {
			failed = append(failed, c.Invariant)
		}
	}
	require.Equal(t, []string{"X1"}, failed)
}
