package fanout_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/workload"
	"github.com/inboxd/inboxd/producer"
)

// appendEvents appends evs asynchronously (each twice when dup) and waits
// for every acknowledgement.
func appendEvents(t testing.TB, p *producer.Producer, evs []*events.Event, dup bool) {
	t.Helper()
	ctx := testenv.Ctx(t, 2*time.Minute)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for _, e := range evs {
		n := 1
		if dup && (e.Type == events.MessageSent || workload.IsChange(e)) {
			n = 2
		}
		for i := 0; i < n; i++ {
			wg.Add(1)
			p.AppendAsync(ctx, e, func(_ producer.Position, err error) {
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
				wg.Done()
			})
		}
	}
	wg.Wait()
	require.NoError(t, firstErr)
}

func generate(g *workload.Generator, n int) []*events.Event {
	evs := make([]*events.Event, n)
	for i := range evs {
		evs[i] = g.Next()
	}
	return evs
}

// assertOutcome checks the invariants and that the projections are exactly
// what the generator's model says; on several servers each server's and
// the crossing's invariants, and the model against their union.
func assertOutcome(t testing.TB, env *testenv.Env, g *workload.Generator) {
	t.Helper()
	ctx := testenv.Ctx(t, time.Minute)
	env.Verify(t)
	u := env.Union(t)

	require.Equal(t, g.LastSeq, lastSeqsOf(t, u), "every conversation's last_seq is the model's: no seq lost or consumed twice")

	var texts, rejected int
	require.NoError(t, u.QueryRow(ctx, `SELECT count(*) FROM messages WHERE kind = 'text'`).Scan(&texts))
	require.NoError(t, u.QueryRow(ctx, `SELECT count(*) FROM rejections`).Scan(&rejected))
	require.Equal(t, g.Sends, texts, "each accepted send projected exactly once")
	require.Equal(t, g.Rejected, rejected, "each non-member send rejected once")
	assertMessageStates(t, u, g)

	// I7: the stored offsets are the end of the log (each partition's on
	// its server).
	adm := kadm.NewClient(env.Producer.Client())
	ends, err := adm.ListEndOffsets(ctx, env.Topic)
	require.NoError(t, err)
	ends.Each(func(o kadm.ListedOffset) {
		var next int64
		err := env.Pools[env.ServerOf(o.Partition)].QueryRow(ctx, `SELECT next_offset FROM consumer_offsets WHERE topic = $1 AND "partition" = $2`, env.Topic, o.Partition).Scan(&next)
		if o.Offset == 0 {
			return
		}
		require.NoError(t, err)
		require.Equal(t, o.Offset, next, "partition %d: next_offset = last applied + 1", o.Partition)
	})
}

// waitCaughtUp waits for the event topic to be applied (on several
// servers, also every delivery across them).
func waitCaughtUp(t testing.TB, env *testenv.Env) {
	t.Helper()
	env.WaitCaughtUp(t, 3*time.Minute)
}

// lastSeqs returns every conversation's last_seq by id, each read on its
// conversation's server.
func lastSeqs(t testing.TB, env *testenv.Env) map[int64]int64 {
	t.Helper()
	got := map[int64]int64{}
	for i, pool := range env.Pools {
		for id, seq := range lastSeqsOf(t, pool) {
			if env.ConvPool(id) == env.Pools[i] {
				got[id] = seq
			}
		}
	}
	return got
}

// lastSeqsOf returns every conversation's last_seq in q by id.
func lastSeqsOf(t testing.TB, q *pgxpool.Pool) map[int64]int64 {
	t.Helper()
	rows, err := q.Query(testenv.Ctx(t, time.Minute), `SELECT id, last_seq FROM conversations`)
	require.NoError(t, err)
	got := map[int64]int64{}
	for rows.Next() {
		var id, seq int64
		require.NoError(t, rows.Scan(&id, &seq))
		got[id] = seq
	}
	require.NoError(t, rows.Err())
	return got
}

// assertMessageStates checks the changes of messages against the model:
// each change applied once, and every text message deleted, edited and
// reacted to as the model says.
func assertMessageStates(t testing.TB, q *pgxpool.Pool, g *workload.Generator) {
	t.Helper()
	ctx := testenv.Ctx(t, time.Minute)
	var changes int
	require.NoError(t, q.QueryRow(ctx, `SELECT count(*) FROM changes`).Scan(&changes))
	require.Equal(t, g.Changes, changes, "each change applied exactly once")
	if g.Changes > 0 {
		t.Logf("%d changes of messages applied", g.Changes)
	}
	rows, err := q.Query(ctx, `SELECT m.conversation_id, m.seq, m.deleted, m.edited_at IS NOT NULL, m.body,
  coalesce((SELECT jsonb_object_agg(r.user_id::text, r.emoji) FROM reactions r WHERE r.conversation_id = m.conversation_id AND r.seq = m.seq), '{}')
FROM messages m WHERE m.kind = 'text'`)
	require.NoError(t, err)
	got := map[[2]int64]workload.MessageState{}
	for rows.Next() {
		var c, s int64
		var st workload.MessageState
		var body string
		var reactions map[string]string
		require.NoError(t, rows.Scan(&c, &s, &st.Deleted, &st.Edited, &body, &reactions))
		if st.Deleted {
			require.Empty(t, body, "conversation %d seq %d is deleted and keeps no body", c, s)
			st.Edited = false
		}
		for u, e := range reactions {
			if st.Reactions == nil {
				st.Reactions = map[int64]string{}
			}
			var id int64
			_, err := fmt.Sscan(u, &id)
			require.NoError(t, err)
			st.Reactions[id] = e
		}
		got[[2]int64{c, s}] = st
	}
	require.NoError(t, rows.Err())
	require.Equal(t, g.Messages(), got, "every message's state is the model's")
}
