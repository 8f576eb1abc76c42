package gateway

import (
	"context"
	"net/http"
	"testing"

	"github.com/inboxd/inboxd/projection"
	"github.com/stretchr/testify/require"
)

// What counts cost for a user with 2,000 conversations (docs/decisions.md, "Unread and mention counts"):
//
//	go test ./gateway -run XXX -bench Counts -benchtime 200x
//
// The user is in 2,000 conversations of 30 messages each (3 members),
// generated with SQL as the projector would leave them: in half of them it
// has read everything, in the others it stopped at a random point, and
// every tenth message mentions it. ConversationPage is GET
// /v1/conversations?limit=50 (50 records with their counts); SyncTotals is
// a GET /v1/sync of one entry, which carries the totals over all 2,000;
// TotalsQuery is the totals' statement alone.

const sqlCountsWorld = `
INSERT INTO conversations (id, title, created_by, created_at, last_seq, last_at, text_count)
SELECT c, 'c' || c, 1, now(), 31, now() - (c || ' seconds')::interval, 30 FROM generate_series(1, 2000) c;
INSERT INTO member_spans (conversation_id, user_id, joined_seq)
SELECT c, u, 1 FROM generate_series(1, 2000) c, (VALUES (1), (2), (3)) v(u);
INSERT INTO messages (conversation_id, seq, msg_id, sender_id, kind, body, created_at, ord, mentions)
SELECT c, s, gen_random_uuid(), CASE WHEN s = 1 THEN 1 ELSE 2 + s % 2 END, CASE WHEN s = 1 THEN 'system' ELSE 'text' END,
	CASE WHEN s = 1 THEN '{"event":"conversation.created"}' ELSE 'message ' || s END, now(), s - 1,
	CASE WHEN s % 10 = 0 THEN ARRAY[1::bigint] END
FROM generate_series(1, 2000) c, generate_series(1, 31) s;
INSERT INTO mentions (user_id, conversation_id, seq)
SELECT 1, c, s FROM generate_series(1, 2000) c, generate_series(10, 30, 10) s;
INSERT INTO users (id, inbox_seq, record_version) VALUES (1, 0, 2000), (2, 0, 2000), (3, 0, 2000);
INSERT INTO records (user_id, conversation_id, read_seq, version)
SELECT 1, c, CASE WHEN c % 2 = 0 THEN 31 ELSE 1 + (c * 7) % 30 END, c FROM generate_series(1, 2000) c;
ANALYZE;`

func countsWorld(b *testing.B, tweak func(*Config)) (*tgw, *user) {
	tg := newGateway(b, tweak)
	_, err := tg.env.Pool.Exec(context.Background(), sqlCountsWorld)
	require.NoError(b, err)
	return tg, tg.user(b, 1)
}

func BenchmarkCountsConversationPage(b *testing.B) {
	_, u := countsWorld(b, nil)
	b.ResetTimer()
	for range b.N {
		r := u.do(b, "GET", "/v1/conversations?limit=50", nil)
		if r.status != http.StatusOK {
			b.Fatalf("%s", r)
		}
	}
}

// BenchmarkCountsSyncTotals counts the totals in every sync (the first
// sync at each head); BenchmarkCountsSyncAtSameHead asks again at the same
// head, which the gateway answers from the totals it remembers.
func BenchmarkCountsSyncTotals(b *testing.B) {
	benchSyncTotals(b, func(c *Config) { c.CountsCacheUsers = -1 })
}

func BenchmarkCountsSyncAtSameHead(b *testing.B) { benchSyncTotals(b, nil) }

func benchSyncTotals(b *testing.B, tweak func(*Config)) {
	_, u := countsWorld(b, tweak)
	s := u.sync(b, "after=0&limit=1")
	require.Positive(b, s.UnreadTotal)
	require.Positive(b, s.MentionTotal)
	b.ResetTimer()
	for range b.N {
		if t := u.sync(b, "after=0&limit=1"); t.Counts != s.Counts {
			b.Fatalf("totals %+v, then %+v", s.Counts, t.Counts)
		}
	}
}

func BenchmarkCountsTotalsQuery(b *testing.B) {
	tg, _ := countsWorld(b, nil)
	ctx := context.Background()
	sql := projection.CountsSQL("$1", "")
	b.ResetTimer()
	for range b.N {
		var unread, mentions int64
		if err := tg.env.Pool.QueryRow(ctx, sql, int64(1)).Scan(&unread, &mentions); err != nil {
			b.Fatal(err)
		}
	}
}
