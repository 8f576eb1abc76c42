package notifier_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
)

// Imported history (docs/import.md) notifies nobody: messages appended
// with imported_at are projected but queue no notification; the live
// message after them does, alone.
func TestImportedHistoryNotifiesNobody(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	cid := w.create(t, 1, 2)
	w.run(t, nil)
	at := time.Now().UTC()
	for i := range 5 {
		e := events.New(events.MessageSent, cid, 1)
		e.MsgID, e.Body = uuid.NewString(), events.Ptr(fmt.Sprintf("old %d", i))
		e.At, e.ImportedAt = time.Date(2021, 3, 1, 9, i, 0, 0, time.UTC), &at
		_, err := w.env.Producer.Append(ctx, e)
		require.NoError(t, err)
	}
	seq := w.send(t, 1, cid, "new")
	waitFor(t, 30*time.Second, "user 2's notification", func() bool { return covered(t, w.rcv.taken()[2], cid) > 0 })
	got := w.rcv.taken()[2]
	require.Equal(t, 1, covered(t, got, cid), "only the live message: %+v", got)
	require.Equal(t, seq, got[0].Seq)
	require.Equal(t, seq, got[0].FirstSeq)
	require.Equal(t, int64(5), w.sum(t, `SELECT count(*) FROM messages WHERE imported`))
}
