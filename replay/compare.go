package replay

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/projector"
)

// Diff is what Compare found between a rebuilt shadow and the live
// projections.
type Diff struct {
	Sections       []DiffSection
	Live, Shadow   projector.Report
	RecordsSkipped bool // live had moved past the shadow's offsets
}

// DiffSection is one kind of difference.
type DiffSection struct {
	Name    string
	Count   int64
	Samples []string
}

// Empty says whether the shadow and the live projections agree and both
// satisfy the invariants.
func (d Diff) Empty() bool {
	for _, s := range d.Sections {
		if s.Count > 0 {
			return false
		}
	}
	return d.Live.OK() && d.Shadow.OK()
}

// Print writes the diff readably.
func (d Diff) Print(w io.Writer) {
	fmt.Fprintln(w, "live projections:")
	d.Live.Print(w)
	fmt.Fprintln(w, "rebuilt from the log (shadow):")
	d.Shadow.Print(w)
	fmt.Fprintln(w, "shadow vs live:")
	for _, s := range d.Sections {
		status := "identical"
		if s.Count > 0 {
			status = fmt.Sprintf("DIFFERENT (%d)", s.Count)
		}
		fmt.Fprintf(w, "  %-58s %s\n", s.Name, status)
		for _, x := range s.Samples {
			fmt.Fprintf(w, "      %s\n", x)
		}
	}
	if d.RecordsSkipped {
		fmt.Fprintln(w, "  (records not compared: the live projections moved on past the replayed offsets)")
	}
	if d.Empty() {
		fmt.Fprintln(w, "replay --verify: no difference")
	} else {
		fmt.Fprintln(w, "replay --verify: DIFFERENCES FOUND")
	}
}

// The comparisons are bounded by the shadow: live may have applied more of
// the log since the replay took its end offsets, so live rows beyond each
// conversation's replayed last_seq are not differences. {shadow} is the shadow
// schema.
var comparisons = []struct{ name, sql string }{
	{"conversations (creator, created_at, roles; the owner, title, frozen and slow mode at the same last_seq)", `
SELECT format('conversation %s: shadow (%s, %s, roles %s, owner %s, frozen %s, slow_mode %s, last_seq %s), live %s', s.id, s.title, s.created_by, s.roles, s.owner_id,
  s.frozen, s.slow_mode, s.last_seq,
  coalesce(format('(%s, %s, roles %s, owner %s, frozen %s, slow_mode %s, last_seq %s)', l.title, l.created_by, l.roles, l.owner_id,
    l.frozen, l.slow_mode, l.last_seq), 'missing'))
FROM {shadow}.conversations s LEFT JOIN public.conversations l ON l.id = s.id
WHERE l.id IS NULL OR (l.created_by, l.created_at, l.roles) IS DISTINCT FROM (s.created_by, s.created_at, s.roles)
   OR l.last_seq < s.last_seq
   OR (l.last_seq = s.last_seq AND (l.owner_id, l.title, l.frozen, l.slow_mode) IS DISTINCT FROM (s.owner_id, s.title, s.frozen, s.slow_mode))`},
	{"messages (seq, msg_id, sender, kind, body, time, imported, and the changes: version, deleted, edited, reply, reactions; ord, mentions and a system sender's name)", `
SELECT format('conversation %s seq %s: shadow %s/%s %L, live %s', s.conversation_id, s.seq, s.msg_id, s.sender_id, left(s.body, 40),
  coalesce(format('%s/%s %L', l.msg_id, l.sender_id, left(l.body, 40)), 'missing'))
FROM {shadow}.messages s LEFT JOIN public.messages l ON l.conversation_id = s.conversation_id AND l.seq = s.seq
WHERE l.seq IS NULL OR (l.msg_id, l.sender_id, l.kind, l.created_at, l.reply_to, l.ord, l.mentions, l.mention_all, l.sender_name, l.imported)
     IS DISTINCT FROM (s.msg_id, s.sender_id, s.kind, s.created_at, s.reply_to, s.ord, s.mentions, s.mention_all, s.sender_name, s.imported)
   OR l.version < s.version
   OR (l.version = s.version AND (l.body, l.deleted, l.edited_at, l.reactions) IS DISTINCT FROM (s.body, s.deleted, s.edited_at, s.reactions))
UNION ALL
SELECT format('conversation %s seq %s: live has it (%s), the log does not', l.conversation_id, l.seq, l.msg_id)
FROM public.messages l JOIN {shadow}.conversations c ON c.id = l.conversation_id AND l.seq <= c.last_seq
LEFT JOIN {shadow}.messages s ON s.conversation_id = l.conversation_id AND s.seq = l.seq WHERE s.seq IS NULL`},
	{"read fan-out modes (conversation_modes up to the replayed last_seq)", `
SELECT format('conversation %s from seq %s: shadow read_fanout %s, live %s', s.conversation_id, s.from_seq, s.read_fanout,
  coalesce(l.read_fanout::text, 'missing'))
FROM {shadow}.conversation_modes s LEFT JOIN public.conversation_modes l
  ON l.conversation_id = s.conversation_id AND l.from_seq = s.from_seq
WHERE l.read_fanout IS DISTINCT FROM s.read_fanout
UNION ALL
SELECT format('conversation %s from seq %s: live switches to read_fanout %s, the log does not', l.conversation_id, l.from_seq, l.read_fanout)
FROM public.conversation_modes l JOIN {shadow}.conversations c ON c.id = l.conversation_id AND l.from_seq <= c.last_seq
LEFT JOIN {shadow}.conversation_modes s ON s.conversation_id = l.conversation_id AND s.from_seq = l.from_seq
WHERE s.conversation_id IS NULL`},
	{"membership spans (and their roles, where live is at the replayed last_seq or the span closed)", `
SELECT format('conversation %s user %s joined %s: shadow left %s role %s, live %s', s.conversation_id, s.user_id, s.joined_seq,
  coalesce(s.left_seq::text, 'open'), s.role,
  coalesce(l.left_seq::text || ' role ' || l.role, CASE WHEN l.user_id IS NULL THEN 'missing' ELSE 'open role ' || l.role END))
FROM {shadow}.member_spans s JOIN {shadow}.conversations c ON c.id = s.conversation_id
LEFT JOIN public.conversations lc ON lc.id = s.conversation_id
LEFT JOIN public.member_spans l ON l.conversation_id = s.conversation_id AND l.user_id = s.user_id AND l.joined_seq = s.joined_seq
WHERE l.user_id IS NULL OR (s.left_seq IS NOT NULL AND l.left_seq IS DISTINCT FROM s.left_seq)
   OR (s.left_seq IS NULL AND l.left_seq IS NOT NULL AND l.left_seq <= c.last_seq)
   OR ((s.left_seq IS NOT NULL OR lc.last_seq = c.last_seq) AND l.role <> s.role)`},
	{"bans and mutes (where live is at the replayed last_seq)", `
SELECT format('conversation %s user %s %s: shadow until %s by %s, live %s', s.conversation_id, s.user_id, s.kind,
  coalesce(s.until::text, 'lifted'), s.set_by, coalesce(format('until %s by %s', coalesce(l.until::text, 'lifted'), l.set_by), 'none'))
FROM {shadow}.sanctions s JOIN {shadow}.conversations c ON c.id = s.conversation_id
JOIN public.conversations lc ON lc.id = s.conversation_id AND lc.last_seq = c.last_seq
LEFT JOIN public.sanctions l ON l.conversation_id = s.conversation_id AND l.user_id = s.user_id AND l.kind = s.kind
WHERE l.user_id IS NULL OR (l.until, l.set_by, l.set_at) IS DISTINCT FROM (s.until, s.set_by, s.set_at)
UNION ALL
SELECT format('conversation %s user %s %s: live only', l.conversation_id, l.user_id, l.kind)
FROM public.sanctions l JOIN public.conversations lc ON lc.id = l.conversation_id
JOIN {shadow}.conversations c ON c.id = l.conversation_id AND c.last_seq = lc.last_seq
LEFT JOIN {shadow}.sanctions s ON s.conversation_id = l.conversation_id AND s.user_id = l.user_id AND s.kind = l.kind
WHERE s.user_id IS NULL`},
	{"inboxes as sets of (conversation, seq)", `
WITH s AS (SELECT i.user_id, i.conversation_id, i.seq FROM {shadow}.inbox i WHERE i.kind = 1),
     l AS (SELECT i.user_id, i.conversation_id, i.seq FROM public.inbox i
           JOIN {shadow}.conversations c ON c.id = i.conversation_id AND i.seq <= c.last_seq WHERE i.kind = 1),
     pruned AS (SELECT id FROM public.users WHERE inbox_floor > 0)
SELECT format('user %s: conversation %s seq %s only in the rebuilt inbox', user_id, conversation_id, seq)
FROM (SELECT * FROM s EXCEPT SELECT * FROM l) x WHERE user_id NOT IN (SELECT id FROM pruned)
UNION ALL
SELECT format('user %s: conversation %s seq %s only in the live inbox', user_id, conversation_id, seq)
FROM (SELECT * FROM l EXCEPT SELECT * FROM s) y`},
	{"reactions of messages at the same version", `
SELECT format('conversation %s seq %s user %s: shadow %s, live %s', s.conversation_id, s.seq, s.user_id, s.emoji, coalesce(l.emoji, 'none'))
FROM {shadow}.reactions s JOIN {shadow}.messages sm ON sm.conversation_id = s.conversation_id AND sm.seq = s.seq
JOIN public.messages lm ON lm.conversation_id = s.conversation_id AND lm.seq = s.seq AND lm.version = sm.version
LEFT JOIN public.reactions l ON l.conversation_id = s.conversation_id AND l.seq = s.seq AND l.user_id = s.user_id
WHERE l.emoji IS DISTINCT FROM s.emoji`},
	{"reports (the rebuilt ones: message, reporter, reason, note, time; a rebuilt resolution)", `
SELECT format('report %s: shadow conversation %s seq %s by %s (%s, %s), live %s', s.id, s.conversation_id, s.seq, s.reporter_id,
  s.reason, s.state, coalesce(format('conversation %s seq %s by %s (%s, %s)', l.conversation_id, l.seq, l.reporter_id, l.reason, l.state), 'missing'))
FROM {shadow}.reports s LEFT JOIN public.reports l ON l.id = s.id
WHERE l.id IS NULL
   OR (l.event_id, l.conversation_id, l.seq, l.msg_id, l.sender_id, l.reporter_id, l.reason, l.note, l.created_at)
     IS DISTINCT FROM (s.event_id, s.conversation_id, s.seq, s.msg_id, s.sender_id, s.reporter_id, s.reason, s.note, s.created_at)
   OR (s.state = 'resolved' AND (l.state, l.resolution, l.resolution_note, l.resolved_by, l.resolved_at)
     IS DISTINCT FROM (s.state, s.resolution, s.resolution_note, s.resolved_by, s.resolved_at))`},
	{"rejections", `
SELECT format('event %s rejected by the replay (%s), not live', s.event_id, s.reason)
FROM {shadow}.rejections s LEFT JOIN public.rejections l ON l.event_id = s.event_id WHERE l.event_id IS NULL`},
}

const recordsComparison = `
SELECT format('user %s conversation %s: shadow pinned=%s muted=%s read=%s removed=%s, live %s', s.user_id, s.conversation_id,
  s.pinned, s.muted, s.read_seq, s.removed, coalesce(format('pinned=%s muted=%s read=%s removed=%s', l.pinned, l.muted, l.read_seq, l.removed), 'missing'))
FROM {shadow}.records s LEFT JOIN public.records l ON l.user_id = s.user_id AND l.conversation_id = s.conversation_id
WHERE l.user_id IS NULL OR (l.pinned, l.muted, l.read_seq, l.removed) IS DISTINCT FROM (s.pinned, s.muted, s.read_seq, s.removed)`

// Compare diffs the shadow schema with the live (public) projections and
// runs the invariant checks on both.
func Compare(ctx context.Context, live, shadow *pgxpool.Pool, schema string) (Diff, error) {
	var d Diff
	q := pgx.Identifier{schema}.Sanitize()
	run := func(name, sqlText string) error {
		rows, err := live.Query(ctx, strings.ReplaceAll(sqlText, "{shadow}", q))
		if err != nil {
			return fmt.Errorf("compare %s: %w", name, err)
		}
		defer rows.Close()
		sec := DiffSection{Name: name}
		for rows.Next() {
			sec.Count++
			if len(sec.Samples) < 10 {
				var s string
				if err := rows.Scan(&s); err != nil {
					return err
				}
				sec.Samples = append(sec.Samples, s)
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("compare %s: %w", name, err)
		}
		d.Sections = append(d.Sections, sec)
		return nil
	}
	for _, c := range comparisons {
		if err := run(c.name, c.sql); err != nil {
			return d, err
		}
	}
	// Records change without a seq (pins, reads), so they are only
	// comparable when live stands exactly where the replay ended.
	var moved bool
	err := live.QueryRow(ctx, strings.ReplaceAll(`SELECT EXISTS (
SELECT 1 FROM public.consumer_offsets l FULL JOIN {shadow}.consumer_offsets s ON s.topic = l.topic AND s."partition" = l."partition"
WHERE l.next_offset IS DISTINCT FROM s.next_offset)`, "{shadow}", q)).Scan(&moved)
	if err != nil {
		return d, fmt.Errorf("compare offsets: %w", err)
	}
	if moved {
		d.RecordsSkipped = true
	} else if err := run("records (pinned, muted, read_seq, removed)", recordsComparison); err != nil {
		return d, err
	}
	if d.Live, err = projector.Verify(ctx, live); err != nil {
		return d, fmt.Errorf("verify live: %w", err)
	}
	if d.Shadow, err = projector.Verify(ctx, shadow); err != nil {
		return d, fmt.Errorf("verify shadow: %w", err)
	}
	return d, nil
}

// String is the diff as text.
func (d Diff) String() string {
	var sb strings.Builder
	d.Print(&sb)
	return sb.String()
}
