package projector_test

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projector"
)

// upload stores an upload of user 10 in conversation 1 in state, claimed
// by msgID (none when empty), and returns its description.
func upload(t *testing.T, pool *pgxpool.Pool, state, msgID string) events.Attachment {
	t.Helper()
	a := events.Attachment{ID: uuid.NewString(), Name: "f.bin", ContentType: "application/octet-stream", Size: 10,
		Key: base64.RawURLEncoding.EncodeToString(events.NewKey())}
	var claim any
	if msgID != "" {
		claim = msgID
	}
	_, err := pool.Exec(context.Background(), `INSERT INTO uploads (id, conversation_id, user_id, name, content_type, size,
	key, object_key, state, msg_id, expires_at) VALUES ($1::uuid, 1, 10, 'f.bin', 'application/octet-stream', 10, $2, $1::text, $3, $4, now())`,
		a.ID, events.NewKey(), state, claim)
	require.NoError(t, err)
	return a
}

// The projection keeps of a send's attachments those whose uploads it
// claimed and that are still open (one the sweeper took, or one claimed by
// no message, is dropped: no message may point at a missing object), marks
// them attached, and a delete erases them: the column, and the uploads'
// state and keys.
func TestAttachmentsKeptOnlyWhileClaimed(t *testing.T) {
	ctx := context.Background()
	pool, p := newProjector(t, projector.Config{})
	e := sent(1, 10, "")
	kept := upload(t, pool, "open", e.MsgID)
	swept := upload(t, pool, "removing", e.MsgID)
	unclaimed := upload(t, pool, "open", "")
	e.Attachments = []events.Attachment{kept, swept, unclaimed}
	_, err := p.Apply(ctx, []projector.Record{{Offset: 0, Event: created(1, 10, 11)}, {Offset: 1, Event: e}})
	require.NoError(t, err)

	var got []events.Attachment
	require.NoError(t, pool.QueryRow(ctx, `SELECT attachments FROM messages WHERE msg_id = $1`, e.MsgID).Scan(&got))
	require.Equal(t, []events.Attachment{kept}, got)
	state := func(id string) (s string, keyed bool) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT state, key IS NOT NULL FROM uploads WHERE id = $1`, id).Scan(&s, &keyed))
		return s, keyed
	}
	s, keyed := state(kept.ID)
	require.Equal(t, "attached", s)
	require.False(t, keyed, "its key now lives in the message alone")
	s, _ = state(unclaimed.ID)
	require.Equal(t, "open", s, "not this message's: left to expire")

	del := events.New(events.MessageDeleted, 1, 10)
	del.Seq, del.ChangeID = 2, uuid.NewString()
	_, err = p.Apply(ctx, []projector.Record{{Offset: 2, Event: del}})
	require.NoError(t, err)
	var erased *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT attachments::text FROM messages WHERE msg_id = $1`, e.MsgID).Scan(&erased))
	require.Nil(t, erased)
	s, _ = state(kept.ID)
	require.Equal(t, "erased", s)
	requireVerified(t, pool)
}
