package projection

// How the unread and mention counts are read from the projections
// (docs/decisions.md, "Unread and mention counts"): the gateway's records
// and sync answers and the notifier's badges count them the same way.

// CountsOf is the unread and mention counts (columns unread, mentions) of
// the records row aliased r whose last visible seq is the SQL expression
// last and whose ord there is lastOrd (docs/decisions.md, "Unread and
// mention counts"). The text messages in (read_seq, last] are a difference
// of ords; the deleted ones and the mentions of the range come from small
// partial indexes. A removed record, or one read to its end, costs nothing.
func CountsOf(r, last, lastOrd string) string {
	none := r + `.removed OR ` + last + ` IS NULL OR ` + last + ` <= ` + r + `.read_seq`
	in := func(a string) string { return a + `.seq > ` + r + `.read_seq AND ` + a + `.seq <= ` + last }
	return `CASE WHEN ` + none + ` THEN 0 ELSE COALESCE(` + lastOrd + `, 0)
		- COALESCE((SELECT fo.ord FROM messages fo WHERE fo.conversation_id = ` + r + `.conversation_id AND fo.seq = ` + r + `.read_seq), 0)
		- (SELECT count(*) FROM messages dm WHERE dm.conversation_id = ` + r + `.conversation_id AND dm.deleted AND dm.kind = 'text' AND ` + in("dm") + `)
	END AS unread,
	CASE WHEN ` + none + ` THEN 0 ELSE
		(SELECT count(*) FROM mentions mn JOIN messages mm ON mm.conversation_id = mn.conversation_id AND mm.seq = mn.seq
			WHERE mn.user_id = ` + r + `.user_id AND mn.conversation_id = ` + r + `.conversation_id AND ` + in("mn") + ` AND NOT mm.deleted)
		+ (SELECT count(*) FROM messages am WHERE am.conversation_id = ` + r + `.conversation_id AND am.mention_all
			AND ` + in("am") + ` AND NOT am.deleted AND am.sender_id <> ` + r + `.user_id
			AND NOT EXISTS (SELECT 1 FROM mentions x WHERE x.user_id = ` + r + `.user_id AND x.conversation_id = am.conversation_id AND x.seq = am.seq))
	END AS mentions`
}

// CountsSQL is the user's totals (user is the SQL expression of the
// user) over its current records: unread of those not muted, mentions of
// all (columns unread_total, mention_total). gate, when not empty, is a
// condition on the outer query that must hold for anything to be counted
// (else both are 0).
func CountsSQL(user, gate string) string {
	if gate != "" {
		gate = " AND " + gate
	}
	return `SELECT COALESCE(sum(cnt.unread) FILTER (WHERE NOT r.muted), 0)::bigint AS unread_total,
	COALESCE(sum(cnt.mentions), 0)::bigint AS mention_total
FROM records r JOIN conversations c ON c.id = r.conversation_id
CROSS JOIN LATERAL (SELECT ` + CountsOf("r", "c.last_seq",
		"(SELECT lo.ord FROM messages lo WHERE lo.conversation_id = c.id AND lo.seq = c.last_seq)") + `) cnt
WHERE r.user_id = ` + user + ` AND NOT r.removed AND c.last_seq > r.read_seq` + gate
}
