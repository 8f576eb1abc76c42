package fanout_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/testenv"
)

func TestSmoke(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	ctx := context.Background()
	c := events.New(events.ConversationCreated, 1, 10)
	c.Members = []int64{11, 12}
	c.Title = "hello"
	_, err := env.Producer.Append(ctx, c)
	require.NoError(t, err)
	for i := 0; i < 5; i++ {
		m := events.New(events.MessageSent, 1, 11)
		m.MsgID = uuid.NewString()
		m.Body = events.Ptr("hi")
		_, err := env.Producer.Append(ctx, m)
		require.NoError(t, err)
	}
	env.WaitCaughtUp(t, 30*time.Second)
	var head int64
	require.NoError(t, env.UserPool(12).QueryRow(ctx, `SELECT inbox_seq FROM users WHERE id = 12`).Scan(&head))
	require.Equal(t, int64(7), head) // created msg + record + 5 messages
	env.Verify(t)
}
