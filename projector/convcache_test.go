package projector_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projector"
)

// got says whether user's inbox has an entry of the message e sent.
func got(t *testing.T, pool *pgxpool.Pool, user int64, e *events.Event) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM inbox i
JOIN messages m ON m.conversation_id = i.conversation_id AND m.seq = i.seq WHERE i.user_id = $1 AND m.msg_id = $2)`,
		user, e.MsgID).Scan(&ok))
	return ok
}

// TestConversationCacheFollowsTheOffsets: a projector reads a conversation
// once and takes it from its cache in the next batches of the partition;
// when another projector moved the partition meanwhile (a rebalance: it
// added a member), the cache is behind and the conversation is read again,
// so the new member gets the next message; a projector without a cache
// reads every batch's conversations.
func TestConversationCacheFollowsTheOffsets(t *testing.T) {
	ctx := context.Background()
	pool, a := newProjector(t, projector.Config{})
	b, err := projector.New(projector.Config{Topic: "t"}, pool)
	require.NoError(t, err)
	none, err := projector.New(projector.Config{Topic: "t", ConversationCache: -1}, pool)
	require.NoError(t, err)

	res, err := a.Apply(ctx, []projector.Record{{Partition: 0, Offset: 0, Event: created(1, 10, 10, 11)}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Conversations)

	res, err = a.Apply(ctx, []projector.Record{{Partition: 0, Offset: 1, Event: sent(1, 10, "one")}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Messages)
	require.Equal(t, 1, res.Cached, "the conversation came from the cache")
	require.Equal(t, 0, res.Conversations)

	// Another projector moves the partition: a member joins.
	added := events.New(events.MemberAdded, 1, 10)
	added.UserID = 12
	res, err = b.Apply(ctx, []projector.Record{{Partition: 0, Offset: 2, Event: added}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Conversations, "b had never read it")

	two := sent(1, 11, "two")
	res, err = a.Apply(ctx, []projector.Record{{Partition: 0, Offset: 3, Event: two}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Messages)
	require.Equal(t, 1, res.Behind, "the partition moved under a's cache")
	require.Equal(t, 0, res.Cached)
	require.True(t, got(t, pool, 12, two), "the member b added gets a's next message")

	// a's cache caught up: the next batch takes it again; a batch naming a
	// conversation a has never seen reads that one only.
	three := sent(1, 12, "three")
	res, err = a.Apply(ctx, []projector.Record{
		{Partition: 0, Offset: 4, Event: three},
		{Partition: 1, Offset: 0, Event: created(2, 20, 20, 21)},
	})
	require.NoError(t, err)
	require.Equal(t, 1, res.Cached)
	require.Equal(t, 1, res.Conversations)
	require.Equal(t, 2, res.Messages, "three and the system message of the creation")
	require.True(t, got(t, pool, 10, three), "a message from the member b added, through the cache")

	// A removal through the cache: the removed member gets nothing after.
	removed := events.New(events.MemberRemoved, 1, 10)
	removed.UserID = 11
	res, err = a.Apply(ctx, []projector.Record{
		{Partition: 0, Offset: 5, Event: removed},
		{Partition: 0, Offset: 6, Event: sent(1, 10, "four")},
	})
	require.NoError(t, err)
	require.Equal(t, 1, res.Cached)
	five := sent(1, 10, "five")
	res, err = a.Apply(ctx, []projector.Record{{Partition: 0, Offset: 7, Event: five}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Cached)
	require.False(t, got(t, pool, 11, five), "a removed member gets no more messages")
	require.True(t, got(t, pool, 12, five))

	res, err = none.Apply(ctx, []projector.Record{{Partition: 0, Offset: 8, Event: sent(1, 10, "six")}})
	require.NoError(t, err)
	require.Equal(t, 0, res.Cached)
	require.Equal(t, 1, res.Conversations)
	// a's cache is behind again (none moved the partition).
	res, err = a.Apply(ctx, []projector.Record{{Partition: 0, Offset: 9, Event: sent(1, 10, "seven")}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Behind)

	requireVerified(t, pool)
}

// TestConversationCacheKeepsNothingOfARolledBackBatch: a batch whose
// writes fail leaves the cache as it was, so the retry projects from the
// database's state, not from the failed batch's.
func TestConversationCacheKeepsNothingOfARolledBackBatch(t *testing.T) {
	ctx := context.Background()
	pool, p := newProjector(t, projector.Config{})
	_, err := p.Apply(ctx, []projector.Record{{Partition: 0, Offset: 0, Event: created(1, 10, 10, 11)}})
	require.NoError(t, err)

	added := events.New(events.MemberAdded, 1, 10)
	added.UserID = 12
	_, err = pool.Exec(ctx, `ALTER TABLE member_spans ADD CONSTRAINT no_12 CHECK (user_id <> 12)`)
	require.NoError(t, err)
	_, err = p.Apply(ctx, []projector.Record{{Partition: 0, Offset: 1, Event: added}})
	require.Error(t, err)
	_, err = pool.Exec(ctx, `ALTER TABLE member_spans DROP CONSTRAINT no_12`)
	require.NoError(t, err)

	// Not the join (refused above, skipped here as if dead-lettered): a
	// message, which must not reach 12.
	one := sent(1, 10, "one")
	res, err := p.Apply(ctx, []projector.Record{{Partition: 0, Offset: 2, Event: one}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Cached)
	require.False(t, got(t, pool, 12, one), "the rolled-back join left nothing in the cache")
	require.True(t, got(t, pool, 11, one))
	requireVerified(t, pool)
}
