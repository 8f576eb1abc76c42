package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/testenv"
)

// A deleted message is erased from the log: its body was appended sealed
// with a key of its own (as the gateway does), the delete destroys the key,
// and a replay rebuilds the message deleted, with no body; a message that
// was not deleted replays with its body. The log never held either body in
// plain text.
func TestDeleteErasesSealedBody(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 2})
	stop := env.StartFanout(t)
	ctx := testenv.Ctx(t, 3*time.Minute)

	created := events.New(events.ConversationCreated, 1, 10)
	created.Members = []int64{11}
	sealedSend := func(body string) *events.Event {
		e := events.New(events.MessageSent, 1, 10)
		e.MsgID = uuid.NewString()
		key := events.NewKey()
		_, err := env.ConvPool(1).Exec(ctx, `INSERT INTO body_keys (msg_id, key) VALUES ($1, $2)`, e.MsgID, key)
		require.NoError(t, err)
		e.SealedBody, err = events.Seal(key, e.MsgID, body)
		require.NoError(t, err)
		return e
	}
	secret, kept := sealedSend("the secret"), sealedSend("still here")
	del := events.New(events.MessageDeleted, 1, 10)
	del.ChangeID, del.Seq = uuid.NewString(), 2
	appendAll(t, env.Producer, []*events.Event{created, secret, kept, del}, true)
	env.WaitCaughtUp(t, time.Minute)

	state := func() (secretBody, keptBody string, deleted bool, keys int) {
		require.NoError(t, env.ConvPool(1).QueryRow(ctx, `SELECT (SELECT body FROM messages WHERE conversation_id = 1 AND seq = 2),
			(SELECT body FROM messages WHERE conversation_id = 1 AND seq = 3),
			(SELECT deleted FROM messages WHERE conversation_id = 1 AND seq = 2),
			(SELECT count(*) FROM body_keys)`).Scan(&secretBody, &keptBody, &deleted, &keys))
		return
	}
	sb, kb, deleted, keys := state()
	require.Equal(t, "", sb)
	require.True(t, deleted)
	require.Equal(t, "still here", kb, "a sealed body opens with its key")
	require.Equal(t, 1, keys, "the deleted message's key is destroyed")

	// The log holds no plain text of either body.
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(env.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	seen := 0
	for seen < 5 { // 4 events, the send records twice
		fs := cl.PollFetches(ctx)
		require.NoError(t, fs.Err())
		fs.EachRecord(func(r *kgo.Record) {
			seen++
			require.NotContains(t, string(r.Value), "secret")
			require.NotContains(t, string(r.Value), "still here")
		})
	}

	stop()
	_, err = env.Replay(context.Background(), cfg(env))
	require.NoError(t, err)
	sb, kb, deleted, _ = state()
	require.Equal(t, "", sb, "a replay cannot bring a deleted body back")
	require.True(t, deleted)
	require.Equal(t, "still here", kb)
	env.Verify(t)
}
