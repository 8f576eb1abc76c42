package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// TestConcurrentSendersAndReaders is acceptance 3: many senders to
// overlapping conversations while readers sync (paging) and long-poll; every
// reader sees a gap-free sequence of inbox seqs, each entry exactly once, and
// ends at its head.
func TestConcurrentSendersAndReaders(t *testing.T) {
	tg := newGateway(t, nil)
	members := [][]int64{{1, 2, 3, 4}, {3, 4, 5, 6}, {5, 6, 7, 8}, {1, 3, 5, 7, 8}}
	convs := make([]int64, len(members))
	for i, ms := range members {
		convs[i] = tg.user(t, ms[0]).create(t, "c"+strconv.Itoa(i), ms[1:]...)
	}

	const perSender = 20
	var finals sync.Map // user id -> final head, set when the senders are done
	var failed atomic.Value
	fail := func(err error) { failed.CompareAndSwap(nil, err) }

	var readers sync.WaitGroup
	received := make([]int, 9)
	for uid := int64(1); uid <= 8; uid++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			u := tg.user(t, uid)
			longPoll := uid%2 == 1
			var cursor int64
			lastSeq := map[int64]int64{}
			for failed.Load() == nil {
				if f, ok := finals.Load(uid); ok && cursor == f.(int64) {
					return
				}
				q := "after=" + strconv.FormatInt(cursor, 10)
				if longPoll {
					q += "&limit=20&wait=2"
				} else {
					q += "&limit=7"
				}
				r, err := u.doE("GET", "/v1/sync?"+q, nil)
				if err != nil {
					fail(err)
					return
				}
				var s protocol.SyncAnswer
				if r.status != http.StatusOK || decodeInto(r.body, &s) != nil || s.TooLong {
					fail(fmt.Errorf("user %d: %s", uid, r))
					return
				}
				for _, e := range s.Entries {
					if e.InboxSeq != cursor+1 {
						fail(fmt.Errorf("user %d: inbox_seq %d after %d", uid, e.InboxSeq, cursor))
						return
					}
					cursor = e.InboxSeq
					received[uid]++
					if e.Message != nil {
						if e.Message.Seq <= lastSeq[e.ConversationID] {
							fail(fmt.Errorf("user %d: conversation %d seq %d after %d", uid, e.ConversationID, e.Message.Seq, lastSeq[e.ConversationID]))
							return
						}
						lastSeq[e.ConversationID] = e.Message.Seq
					}
				}
				if !longPoll && len(s.Entries) == 0 {
					time.Sleep(2 * time.Millisecond)
				}
			}
		}()
	}

	var senders sync.WaitGroup
	for ci, ms := range members {
		for _, sender := range ms[:2] {
			senders.Add(1)
			go func() {
				defer senders.Done()
				u := tg.user(t, sender)
				for i := 0; i < perSender && failed.Load() == nil; i++ {
					r, err := u.doE("POST", fmt.Sprintf("/v1/conversations/%d/messages", convs[ci]),
						map[string]any{"msg_id": uuid.NewString(), "body": fmt.Sprintf("%d from %d", i, sender)})
					if err != nil || r.status != http.StatusCreated {
						fail(fmt.Errorf("send: %v %s", err, r))
						return
					}
				}
			}()
		}
	}
	senders.Wait()
	tg.env.WaitCaughtUp(t, 60*time.Second)
	for uid := int64(1); uid <= 8; uid++ {
		var head int64
		require.NoError(t, tg.env.UserPool(uid).QueryRow(context.Background(), `SELECT inbox_seq FROM users WHERE id = $1`, uid).Scan(&head))
		finals.Store(uid, head)
	}
	readers.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(err)
	}
	for uid := int64(1); uid <= 8; uid++ {
		f, _ := finals.Load(uid)
		require.Equal(t, f.(int64), int64(received[uid]), "user %d", uid)
	}
	tg.verify(t)
}

// TestSameMsgIDConcurrently is acceptance 5: five concurrent sends of one
// msg_id make one message and five answers with the same seq.
func TestSameMsgIDConcurrently(t *testing.T) {
	tg := newGateway(t, nil)
	a := tg.user(t, 1)
	cid := a.create(t, "dup", 2)
	id := uuid.NewString()
	type answer struct {
		status int
		msg    protocol.Message
		err    error
	}
	answers := make([]answer, 5)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r resp
			var err error
			if i%2 == 0 {
				r, err = a.doE("POST", fmt.Sprintf("/v1/conversations/%d/messages", cid), map[string]any{"msg_id": id, "body": "once"})
			} else {
				r, err = a.doE("POST", fmt.Sprintf("/v1/conversations/%d/messages", cid), `{"body":"once"}`, "Idempotency-Key", id)
			}
			answers[i] = answer{status: r.status, err: err}
			if err == nil {
				answers[i].err = decodeInto(r.body, &answers[i].msg)
			}
		}()
	}
	wg.Wait()
	for i, an := range answers {
		require.NoError(t, an.err)
		require.Contains(t, []int{http.StatusCreated, http.StatusOK}, an.status, "answer %d", i)
		require.Equal(t, id, an.msg.MsgID)
		require.Equal(t, answers[0].msg.Seq, an.msg.Seq)
	}
	tg.env.WaitCaughtUp(t, 30*time.Second)
	var n, last int64
	require.NoError(t, tg.env.ConvPool(cid).QueryRow(context.Background(), `SELECT count(*) FROM messages WHERE msg_id = $1`, id).Scan(&n))
	require.Equal(t, int64(1), n)
	require.NoError(t, tg.env.ConvPool(cid).QueryRow(context.Background(), `SELECT last_seq FROM conversations WHERE id = $1`, cid).Scan(&last))
	require.Equal(t, int64(2), last, "the created message and one text")
	tg.verify(t)
}
