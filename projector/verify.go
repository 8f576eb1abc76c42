package projector

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Check is the outcome of one invariant check.
type Check struct {
	Name       string
	Invariant  string
	Violations int64
	Samples    []string // up to 5 readable examples
}

// Report is the outcome of Verify.
type Report struct {
	Checks                                    []Check
	Users, Conversations, Messages, InboxRows int64
}

// OK says whether every check passed.
func (r Report) OK() bool {
	for _, c := range r.Checks {
		if c.Violations > 0 {
			return false
		}
	}
	return true
}

// Print writes a readable report.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "projections: %d users, %d conversations, %d messages, %d inbox rows\n",
		r.Users, r.Conversations, r.Messages, r.InboxRows)
	for _, c := range r.Checks {
		status := "ok"
		if c.Violations > 0 {
			status = fmt.Sprintf("VIOLATED (%d)", c.Violations)
		}
		fmt.Fprintf(w, "  %-3s %-62s %s\n", c.Invariant, c.Name, status)
		for _, s := range c.Samples {
			fmt.Fprintf(w, "        %s\n", s)
		}
	}
	if r.OK() {
		fmt.Fprintln(w, "all invariants hold")
	} else {
		fmt.Fprintln(w, "INVARIANTS VIOLATED")
	}
}

// Querier is what Verify reads through (a pool, a connection or a tx).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type checkSQL struct {
	inv, name, sql string // sql returns one text column per violation
}

// Users whose floor is above zero had entries pruned by retention, so the
// "missing entry" checks only apply to entries above the floor; the others
// hold for every row that is there.
var checks = []checkSQL{
	{"I1", "inbox seqs contiguous from floor+1 to head", `
SELECT format('user %s: floor %s head %s, %s rows from %s to %s', u.id, u.inbox_floor, u.inbox_seq, count(i.inbox_seq), min(i.inbox_seq), max(i.inbox_seq))
FROM users u LEFT JOIN inbox i ON i.user_id = u.id
GROUP BY u.id, u.inbox_floor, u.inbox_seq
HAVING count(i.inbox_seq) <> u.inbox_seq - u.inbox_floor
    OR (count(i.inbox_seq) > 0 AND (min(i.inbox_seq) <> u.inbox_floor + 1 OR max(i.inbox_seq) <> u.inbox_seq))`},
	{"I1", "no inbox row of an unknown user", `
SELECT format('user %s has inbox rows but no users row', i.user_id) FROM inbox i LEFT JOIN users u ON u.id = i.user_id WHERE u.id IS NULL GROUP BY i.user_id`},
	{"I2", "message seqs 1..last_seq without holes", `
SELECT format('conversation %s: last_seq %s, %s messages from %s to %s', c.id, c.last_seq, count(m.seq), min(m.seq), max(m.seq))
FROM conversations c LEFT JOIN messages m ON m.conversation_id = c.id
GROUP BY c.id, c.last_seq
HAVING count(m.seq) <> c.last_seq OR (count(m.seq) > 0 AND (min(m.seq) <> 1 OR max(m.seq) <> c.last_seq))`},
	{"I3", "every member has every message of its spans in write fan-out (above its floor), imported history aside", `
WITH written AS (
  SELECT conversation_id, from_seq,
         coalesce(lead(from_seq) OVER (PARTITION BY conversation_id ORDER BY from_seq) - 1, 9223372036854775807) AS to_seq,
         read_fanout
  FROM conversation_modes
), expected AS (
  -- Per span, the messages of its write fan-out ranges, read by index: a
  -- span that began in read mode costs nothing.
  SELECT s.user_id, s.conversation_id, m.seq
  FROM member_spans s JOIN users u ON u.id = s.user_id AND u.inbox_floor = 0
  JOIN written w ON w.conversation_id = s.conversation_id AND NOT w.read_fanout
    AND w.from_seq <= coalesce(s.left_seq, 9223372036854775807) AND w.to_seq >= s.joined_seq
  CROSS JOIN LATERAL (SELECT seq FROM messages m WHERE m.conversation_id = s.conversation_id
    AND m.seq >= greatest(s.joined_seq, w.from_seq) AND m.seq <= least(coalesce(s.left_seq, w.to_seq), w.to_seq)
    AND NOT m.imported) m
), actual AS (
  SELECT user_id, conversation_id, seq FROM inbox WHERE kind = 1
)
SELECT format('user %s misses conversation %s seq %s', user_id, conversation_id, seq)
FROM (SELECT * FROM expected EXCEPT SELECT * FROM actual) x`},
	{"I3", "no one has a message outside its membership spans", `
SELECT format('user %s has conversation %s seq %s without being a member then', i.user_id, i.conversation_id, i.seq)
FROM inbox i WHERE i.kind = 1{local_i} AND NOT EXISTS (
  SELECT 1 FROM member_spans s WHERE s.conversation_id = i.conversation_id AND s.user_id = i.user_id
  AND i.seq >= s.joined_seq AND (s.left_seq IS NULL OR i.seq <= s.left_seq))`},
	{"I3", "each message at most once per inbox", `
SELECT format('user %s has conversation %s seq %s %s times', user_id, conversation_id, seq, count(*))
FROM inbox WHERE kind = 1 GROUP BY user_id, conversation_id, seq HAVING count(*) > 1`},
	{"I3", "inbox entries point at existing messages", `
SELECT format('user %s inbox_seq %s points at missing conversation %s seq %s', i.user_id, i.inbox_seq, i.conversation_id, i.seq)
FROM inbox i LEFT JOIN messages m ON m.conversation_id = i.conversation_id AND m.seq = i.seq
WHERE i.kind = 1 AND m.seq IS NULL{local_i}`},
	{"I4", "a conversation's entries ascend within each inbox", `
SELECT format('user %s: conversation %s seq %s at inbox_seq %s after seq %s', user_id, conversation_id, seq, inbox_seq, prev)
FROM (SELECT user_id, conversation_id, seq, inbox_seq,
             lag(seq) OVER (PARTITION BY user_id, conversation_id ORDER BY inbox_seq) AS prev
      FROM inbox WHERE kind = 1) x WHERE prev >= seq`},
	{"I5", "each msg_id projected once", `
SELECT format('msg_id %s appears %s times', msg_id, count(*)) FROM messages GROUP BY msg_id HAVING count(*) > 1`},
	{"I5", "no rejected msg_id projected from the same event", `
SELECT format('event %s was both rejected and projected', r.event_id) FROM rejections r JOIN messages m ON m.msg_id = r.event_id`},
	{"I6", "no entry above its user's head", `
SELECT format('user %s has inbox_seq %s above head %s', u.id, i.inbox_seq, u.inbox_seq)
FROM inbox i JOIN users u ON u.id = i.user_id WHERE i.inbox_seq > u.inbox_seq OR i.inbox_seq <= u.inbox_floor`},
	{"I7", "rejections lie below the stored offsets", `
SELECT format('rejection at %s/%s but next_offset is %s', r."partition", r."offset", coalesce(o.next_offset, 0))
FROM rejections r LEFT JOIN consumer_offsets o ON o.topic = r.topic AND o."partition" = r."partition"
WHERE o.next_offset IS NULL OR r."offset" >= o.next_offset`},
	{"I8", "record versions strictly increase within each inbox", `
SELECT format('user %s: version %s at inbox_seq %s after version %s', user_id, version, inbox_seq, prev)
FROM (SELECT user_id, version, inbox_seq, lag(version) OVER (PARTITION BY user_id ORDER BY inbox_seq) AS prev
      FROM inbox WHERE kind = 2) x WHERE prev >= version`},
	{"I8", "every record's version is an entry of its user's inbox", `
SELECT format('user %s conversation %s version %s has no inbox entry', r.user_id, r.conversation_id, r.version)
FROM records r JOIN users u ON u.id = r.user_id
WHERE u.inbox_floor = 0 AND NOT EXISTS (
  SELECT 1 FROM inbox i WHERE i.user_id = r.user_id AND i.kind = 2 AND i.version = r.version AND i.conversation_id = r.conversation_id)`},
	{"I8", "user record_version is the highest version", `
SELECT format('user %s: record_version %s, highest record %s', u.id, u.record_version, max(r.version))
FROM users u JOIN records r ON r.user_id = u.id GROUP BY u.id, u.record_version HAVING max(r.version) > u.record_version`},
	{"M1", "update entries point at messages their users could see", `
SELECT format('user %s inbox_seq %s: update of conversation %s seq %s it could not see', i.user_id, i.inbox_seq, i.conversation_id, i.seq)
FROM inbox i LEFT JOIN messages m ON m.conversation_id = i.conversation_id AND m.seq = i.seq
WHERE i.kind = 3{local_i} AND (m.seq IS NULL OR NOT EXISTS (
  SELECT 1 FROM member_spans s WHERE s.conversation_id = i.conversation_id AND s.user_id = i.user_id
  AND i.seq >= s.joined_seq AND (s.left_seq IS NULL OR i.seq <= s.left_seq)))`},
	{"M2", "every change of a message in write fan-out is an update entry of each member who sees it", `
SELECT format('user %s has no update of conversation %s seq %s at version %s', s.user_id, m.conversation_id, m.seq, m.version)
FROM messages m
JOIN member_spans s ON s.conversation_id = m.conversation_id AND s.left_seq IS NULL AND s.joined_seq <= m.seq
JOIN users u ON u.id = s.user_id AND u.inbox_floor = 0
WHERE m.version > 1 AND m.changed_ord = 0 AND NOT EXISTS (
  SELECT 1 FROM inbox i WHERE i.user_id = s.user_id AND i.kind = 3 AND i.conversation_id = m.conversation_id
  AND i.seq = m.seq AND i.version = m.version)`},
	{"M3", "a message's update versions ascend within each inbox", `
SELECT format('user %s: conversation %s seq %s version %s at inbox_seq %s after version %s', user_id, conversation_id, seq, version, inbox_seq, prev)
FROM (SELECT user_id, conversation_id, seq, version, inbox_seq,
             lag(version) OVER (PARTITION BY user_id, conversation_id, seq ORDER BY inbox_seq) AS prev
      FROM inbox WHERE kind = 3) x WHERE prev >= version`},
	{"M4", "a deleted message keeps no body and no reactions", `
SELECT format('conversation %s seq %s is deleted but keeps %s', m.conversation_id, m.seq,
  CASE WHEN m.body <> '' THEN 'its body' ELSE 'reactions' END)
FROM messages m WHERE m.deleted AND (m.body <> '' OR m.reactions IS NOT NULL OR EXISTS (
  SELECT 1 FROM reactions r WHERE r.conversation_id = m.conversation_id AND r.seq = m.seq))`},
	{"M5", "reaction counts are the reactions", `
WITH counted AS (
  SELECT conversation_id, seq, jsonb_object_agg(emoji, n) AS counts
  FROM (SELECT conversation_id, seq, emoji, count(*) AS n FROM reactions GROUP BY 1, 2, 3) x GROUP BY 1, 2)
SELECT format('conversation %s seq %s: counts %s, reactions %s', coalesce(m.conversation_id, c.conversation_id),
  coalesce(m.seq, c.seq), m.reactions, c.counts)
FROM (SELECT * FROM messages WHERE reactions IS NOT NULL) m
FULL JOIN counted c ON c.conversation_id = m.conversation_id AND c.seq = m.seq
WHERE m.reactions IS DISTINCT FROM c.counts`},
	{"M6", "each applied change names a message at or below its version", `
SELECT format('change %s: conversation %s seq %s version %s, message %s', c.change_id, c.conversation_id, c.seq, c.version,
  coalesce('version ' || m.version, 'missing'))
FROM changes c LEFT JOIN messages m ON m.conversation_id = c.conversation_id AND m.seq = c.seq
WHERE m.seq IS NULL OR c.version > m.version`},
	{"C1", "each message's ord counts the text messages up to it, and text_count is the last one's", `
SELECT format('conversation %s seq %s: ord %s, counted %s', conversation_id, seq, ord, counted)
FROM (SELECT conversation_id, seq, ord,
        count(*) FILTER (WHERE kind = 'text') OVER (PARTITION BY conversation_id ORDER BY seq) AS counted
      FROM messages) x WHERE ord <> counted
UNION ALL
SELECT format('conversation %s: text_count %s, last message ord %s', c.id, c.text_count, coalesce(m.ord::text, 'none'))
FROM conversations c LEFT JOIN messages m ON m.conversation_id = c.id AND m.seq = c.last_seq
WHERE c.text_count IS DISTINCT FROM coalesce(m.ord, 0)`},
	{"C2", "a member's read position is at or past its join and its own messages", `
WITH own AS (SELECT conversation_id, sender_id, max(seq) AS s FROM messages WHERE kind = 'text' GROUP BY conversation_id, sender_id)
SELECT format('user %s conversation %s: read_seq %s below %s', r.user_id, r.conversation_id, r.read_seq,
  greatest(s.joined_seq, coalesce(own.s, 0)))
FROM records r JOIN member_spans s ON s.conversation_id = r.conversation_id AND s.user_id = r.user_id AND s.left_seq IS NULL
LEFT JOIN own ON own.conversation_id = r.conversation_id AND own.sender_id = r.user_id
WHERE r.read_seq < greatest(s.joined_seq, coalesce(own.s, 0))`},
	{"C3", "mentions name members who could see the message, not its sender", `
SELECT format('user %s is mentioned by conversation %s seq %s it could not see (or sent)', n.user_id, n.conversation_id, n.seq)
FROM mentions n JOIN messages m ON m.conversation_id = n.conversation_id AND m.seq = n.seq
WHERE m.sender_id = n.user_id OR NOT (n.user_id = ANY(coalesce(m.mentions, '{}'))) OR NOT EXISTS (
  SELECT 1 FROM member_spans s WHERE s.conversation_id = n.conversation_id AND s.user_id = n.user_id
  AND n.seq >= s.joined_seq AND (s.left_seq IS NULL OR n.seq <= s.left_seq))`},
	{"L1", "each conversation's modes start at seq 1, alternate, and end in its read_fanout", `
SELECT format('conversation %s: no mode from seq 1', c.id) FROM conversations c
WHERE NOT EXISTS (SELECT 1 FROM conversation_modes md WHERE md.conversation_id = c.id AND md.from_seq = 1)
UNION ALL
SELECT format('conversation %s: mode %s from seq %s repeats the one before', conversation_id, read_fanout, from_seq)
FROM (SELECT conversation_id, from_seq, read_fanout,
        lag(read_fanout) OVER (PARTITION BY conversation_id ORDER BY from_seq) AS prev FROM conversation_modes) x
WHERE prev = read_fanout
UNION ALL
SELECT format('conversation %s: read_fanout %s, last mode %s', c.id, c.read_fanout, md.read_fanout)
FROM conversations c JOIN LATERAL (SELECT read_fanout FROM conversation_modes WHERE conversation_id = c.id
  ORDER BY from_seq DESC LIMIT 1) md ON true WHERE md.read_fanout <> c.read_fanout`},
	{"L2", "member_count is the current members", `
SELECT format('conversation %s: member_count %s, %s current members', c.id, c.member_count, count(s.user_id))
FROM conversations c LEFT JOIN member_spans s ON s.conversation_id = c.id AND s.left_seq IS NULL
GROUP BY c.id, c.member_count HAVING count(s.user_id) <> c.member_count`},
	{"L3", "only current members are armed", `
SELECT format('user %s is armed in conversation %s without being a member', r.user_id, r.conversation_id)
FROM records r WHERE r.armed AND NOT EXISTS (SELECT 1 FROM member_spans s
  WHERE s.conversation_id = r.conversation_id AND s.user_id = r.user_id AND s.left_seq IS NULL)`},
	{"L4", "changed_ord values are distinct and at most the conversation's change_count", `
SELECT format('conversation %s: changed_ord %s on %s messages, change_count %s', m.conversation_id, m.changed_ord, count(*), c.change_count)
FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE m.changed_ord > 0
GROUP BY m.conversation_id, m.changed_ord, c.change_count HAVING count(*) > 1 OR m.changed_ord > c.change_count`},
	{"R1", "each report names a text message of another sender its reporter could see", `
SELECT format('report %s: conversation %s seq %s by user %s: %s', r.id, r.conversation_id, r.seq, r.reporter_id,
  CASE WHEN m.seq IS NULL THEN 'no such message' WHEN m.msg_id <> r.msg_id OR m.sender_id <> r.sender_id THEN 'another message'
    WHEN m.kind <> 'text' THEN 'a system message' WHEN r.sender_id = r.reporter_id THEN 'its own message'
    ELSE 'a message the reporter never saw' END)
FROM reports r LEFT JOIN messages m ON m.conversation_id = r.conversation_id AND m.seq = r.seq
WHERE m.seq IS NULL OR m.msg_id <> r.msg_id OR m.sender_id <> r.sender_id OR m.kind <> 'text' OR r.sender_id = r.reporter_id
  OR NOT EXISTS (SELECT 1 FROM member_spans s WHERE s.conversation_id = r.conversation_id AND s.user_id = r.reporter_id
    AND r.seq >= s.joined_seq AND (s.left_seq IS NULL OR r.seq <= s.left_seq))`},
	{"O1", "a conversation's owner_id is the one current member of role owner (or none)", `
SELECT format('conversation %s: owner_id %s, current members of role owner: %s', c.id, c.owner_id,
  coalesce(string_agg(s.user_id::text, ', ' ORDER BY s.user_id), 'none'))
FROM conversations c LEFT JOIN member_spans s ON s.conversation_id = c.id AND s.left_seq IS NULL AND s.role = 'owner'
GROUP BY c.id, c.owner_id
HAVING count(s.user_id) <> CASE WHEN c.owner_id = 0 THEN 0 ELSE 1 END
  OR (c.owner_id <> 0 AND bool_or(s.user_id IS DISTINCT FROM c.owner_id))`},
	{"O2", "a user's conversation is owned while its creator stays, unless a role changed", `
SELECT format('conversation %s: created by %s, who never left, has no owner and no role change', c.id, c.created_by)
FROM conversations c JOIN member_spans s ON s.conversation_id = c.id AND s.user_id = c.created_by AND s.joined_seq = 1 AND s.left_seq IS NULL
WHERE c.created_by > 0 AND c.owner_id = 0 AND NOT EXISTS (SELECT 1 FROM messages m
  WHERE m.conversation_id = c.id AND m.kind = 'system' AND strpos(m.body, '"event":"member.role_set"') > 0)`},
	{"S1", "a user banned until lifted is no member", `
SELECT format('conversation %s: user %s is banned until lifted and a member since seq %s', b.conversation_id, b.user_id, s.joined_seq)
FROM sanctions b JOIN member_spans s ON s.conversation_id = b.conversation_id AND s.user_id = b.user_id AND s.left_seq IS NULL
WHERE b.kind = 'ban' AND b.until IS NULL`},
	{"F1", "a conversation's title, frozen and slow_mode are what its creation and conversation.updated messages last set", `
SELECT format('conversation %s: title %L frozen %s slow_mode %s, its messages say title %L frozen %s slow_mode %s',
  c.id, c.title, c.frozen, c.slow_mode, coalesce(t.v, m1.v, c.title), coalesce(f.v, false), coalesce(sm.v, 0))
FROM conversations c
LEFT JOIN LATERAL (SELECT m.body::jsonb->>'title' AS v FROM messages m
  WHERE m.conversation_id = c.id AND m.seq = 1 AND m.kind = 'system') m1 ON true
LEFT JOIN LATERAL (SELECT m.body::jsonb->>'title' AS v FROM messages m WHERE m.conversation_id = c.id AND m.kind = 'system'
  AND strpos(m.body, '"event":"conversation.updated"') > 0 AND m.body::jsonb ? 'title' ORDER BY m.seq DESC LIMIT 1) t ON true
LEFT JOIN LATERAL (SELECT (m.body::jsonb->>'frozen')::boolean AS v FROM messages m WHERE m.conversation_id = c.id AND m.kind = 'system'
  AND strpos(m.body, '"event":"conversation.updated"') > 0 AND m.body::jsonb ? 'frozen' ORDER BY m.seq DESC LIMIT 1) f ON true
LEFT JOIN LATERAL (SELECT (m.body::jsonb->>'slow_mode')::int AS v FROM messages m WHERE m.conversation_id = c.id AND m.kind = 'system'
  AND strpos(m.body, '"event":"conversation.updated"') > 0 AND m.body::jsonb ? 'slow_mode' ORDER BY m.seq DESC LIMIT 1) sm ON true
WHERE c.title <> coalesce(t.v, m1.v, c.title) OR c.frozen <> coalesce(f.v, false) OR c.slow_mode <> coalesce(sm.v, 0)`},
	{"X1", "every text message not deleted is indexed for search by its current body, and no other message", `
SELECT format('conversation %s seq %s (kind %s, deleted %s): search index %s, its body gives %s', m.conversation_id, m.seq, m.kind, m.deleted,
  coalesce(m.search_vector::text, 'none'), coalesce(x.v::text, 'none'))
FROM messages m, LATERAL (SELECT CASE WHEN m.deleted OR m.kind <> 'text' THEN NULL ELSE inboxd_search.vector(m.body) END AS v) x
WHERE m.search_vector IS DISTINCT FROM x.v`},
	{"--", "members and records agree", `
SELECT format('user %s conversation %s: member %s, record removed %s', r.user_id, r.conversation_id, s.user_id IS NOT NULL, r.removed)
FROM records r LEFT JOIN member_spans s ON s.conversation_id = r.conversation_id AND s.user_id = r.user_id AND s.left_seq IS NULL
WHERE (s.user_id IS NULL) <> r.removed{local_r}`},
}

// Verify checks invariants I1–I8, and the rules of message changes
// (M1–M6), the columns counts are made of (C1–C3), read fan-out (L1–L4), reports (R1), roles (O1–O2), bans (S1), settings (F1), the search index (X1), on the projections in the current schema
// search path of q.
func Verify(ctx context.Context, q Querier) (Report, error) {
	return verify(ctx, q, false)
}

// VerifyServer is Verify on one server of a sharded deployment: each
// check reads what this server holds, its users' inboxes and records and
// its conversations, and the checks that follow an inbox entry or a
// record to its conversation leave out the conversations of other
// servers. What it cannot see (a member on another server missing an
// entry of this server's conversation) VerifyCrossing and the union of
// the servers check.
func VerifyServer(ctx context.Context, q Querier) (Report, error) {
	return verify(ctx, q, true)
}

// localConv restricts a check of an inbox entry (i) or a record (r) to
// this server's conversations.
const (
	localInbox  = ` AND EXISTS (SELECT 1 FROM conversations lc WHERE lc.id = i.conversation_id)`
	localRecord = ` AND EXISTS (SELECT 1 FROM conversations lc WHERE lc.id = r.conversation_id)`
)

func verify(ctx context.Context, q Querier, server bool) (Report, error) {
	var r Report
	err := q.QueryRow(ctx, `SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM conversations),
(SELECT count(*) FROM messages), (SELECT count(*) FROM inbox)`).Scan(&r.Users, &r.Conversations, &r.Messages, &r.InboxRows)
	if err != nil {
		return r, fmt.Errorf("count projections: %w", err)
	}
	li, lr := "", ""
	if server {
		li, lr = localInbox, localRecord
	}
	for _, c := range checks {
		rows, err := q.Query(ctx, strings.NewReplacer("{local_i}", li, "{local_r}", lr).Replace(c.sql))
		if err != nil {
			return r, fmt.Errorf("check %s (%s): %w", c.inv, c.name, err)
		}
		ch := Check{Name: c.name, Invariant: c.inv}
		for rows.Next() {
			ch.Violations++
			if len(ch.Samples) < 5 {
				var s string
				if err := rows.Scan(&s); err != nil {
					rows.Close()
					return r, err
				}
				ch.Samples = append(ch.Samples, s)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return r, fmt.Errorf("check %s (%s): %w", c.inv, c.name, err)
		}
		r.Checks = append(r.Checks, ch)
	}
	return r, nil
}

// String is the report as text.
func (r Report) String() string {
	var sb strings.Builder
	r.Print(&sb)
	return sb.String()
}

// VerifyCrossing checks, over every server of a sharded deployment, that
// every delivery emitted was applied once: per source partition and
// destination, the deliveries applied on the users' server (the marks'
// counts) are no more than those emitted on the conversations' server,
// and no fewer than those emitted less those still in its outbox; no mark
// is past the last delivery emitted. Run it caught up (the deliveries
// topic applied): a delivery relayed but not applied yet counts as
// missing.
func VerifyCrossing(ctx context.Context, servers []Querier) (Check, error) {
	c := Check{Invariant: "X1", Name: "every delivery emitted is applied once, across servers"}
	type pair struct{ src, dst int32 }
	type tally struct{ emitted, last, pending, applied, mark int64 }
	all := map[pair]*tally{}
	at := func(p pair) *tally {
		if all[p] == nil {
			all[p] = &tally{}
		}
		return all[p]
	}
	for i, q := range servers {
		reads := []struct {
			sql  string
			into func(t *tally, a, b int64)
		}{
			{`SELECT source_partition, destination, emitted, last_offset FROM delivery_sources`,
				func(t *tally, a, b int64) { t.emitted += a; t.last = max(t.last, b) }},
			{`SELECT source_partition, destination, count(*), 0 FROM outbox GROUP BY 1, 2`,
				func(t *tally, a, _ int64) { t.pending += a }},
			{`SELECT source_partition, destination, applied_count, applied FROM delivery_marks`,
				func(t *tally, a, b int64) { t.applied += a; t.mark = max(t.mark, b) }},
		}
		for _, r := range reads {
			rows, err := q.Query(ctx, r.sql)
			if err != nil {
				return c, fmt.Errorf("server %d: %w", i+1, err)
			}
			for rows.Next() {
				var p pair
				var a, b int64
				if err := rows.Scan(&p.src, &p.dst, &a, &b); err != nil {
					rows.Close()
					return c, fmt.Errorf("server %d: %w", i+1, err)
				}
				r.into(at(p), a, b)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return c, fmt.Errorf("server %d: %w", i+1, err)
			}
		}
	}
	keys := make([]pair, 0, len(all))
	for p := range all {
		keys = append(keys, p)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].src != keys[j].src {
			return keys[i].src < keys[j].src
		}
		return keys[i].dst < keys[j].dst
	})
	for _, p := range keys {
		t := all[p]
		var bad string
		switch {
		case t.applied > t.emitted:
			bad = "applied more deliveries than were emitted"
		case t.applied+t.pending < t.emitted:
			bad = fmt.Sprintf("%d emitted deliveries neither applied nor in the outbox (in the deliveries topic still, or lost)", t.emitted-t.applied-t.pending)
		case t.mark > t.last:
			bad = "the mark is past the last delivery emitted"
		default:
			continue
		}
		c.Violations++
		if len(c.Samples) < 5 {
			c.Samples = append(c.Samples, fmt.Sprintf("source %d to destination %d: %d emitted (last offset %d), %d in the outbox, %d applied (mark %d): %s",
				p.src, p.dst, t.emitted, t.last, t.pending, t.applied, t.mark, bad))
		}
	}
	return c, nil
}
