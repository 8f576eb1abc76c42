package inbox

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/inboxd/inboxd/gateway/internal/rows"
	"github.com/inboxd/inboxd/protocol"
)

// The reads of read-mode conversations (docs/large-conversations.md) that
// the WebSocket pushes need: the large lists of some users, the local
// members of a conversation, and a conversation's new and changed
// messages, read once for all the sessions that get them.

// LargeMembership is one entry of a user's large list and the seq its
// current membership began at.
type LargeMembership struct {
	protocol.LargeConv
	JoinedSeq int64
}

// sqlLargeLists reads the large lists of users $1.
const sqlLargeLists = `SELECT s.user_id, c.id, c.last_seq, c.change_count, s.joined_seq
FROM member_spans s JOIN conversations c ON c.id = s.conversation_id AND c.read_fanout
WHERE s.user_id = ANY($1::bigint[]) AND s.left_seq IS NULL
ORDER BY s.user_id, c.id`

// LargeLists reads the large lists of users, in one statement; a user
// without read-mode conversations maps to nil.
// On several servers it is one statement on each (a user's memberships
// are on its conversations' servers), merged by id.
func (r *Reader) LargeLists(ctx context.Context, users []int64) (map[int64][]LargeMembership, error) {
	out := make(map[int64][]LargeMembership, len(users))
	for _, u := range users {
		out[u] = nil
	}
	for _, db := range r.dbs {
		if err := largeListsOn(ctx, db, users, out); err != nil {
			return nil, err
		}
	}
	if r.sharded() {
		for u, l := range out {
			slices.SortFunc(l, func(a, b LargeMembership) int { return cmp.Compare(a.ConversationID, b.ConversationID) })
			out[u] = l
		}
	}
	return out, nil
}

// largeListsOn adds the large lists of users that db holds to out.
func largeListsOn(ctx context.Context, db Querier, users []int64, out map[int64][]LargeMembership) error {
	rs, err := db.Query(ctx, sqlLargeLists, users)
	if err != nil {
		return fmt.Errorf("read the large lists of %d users: %w", len(users), err)
	}
	defer rs.Close()
	for rs.Next() {
		var u int64
		var m LargeMembership
		if err := rs.Scan(&u, &m.ConversationID, &m.LastSeq, &m.ChangeCount, &m.JoinedSeq); err != nil {
			return fmt.Errorf("read the large lists: %w", err)
		}
		out[u] = append(out[u], m)
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("read the large lists: %w", err)
	}
	return nil
}

// sqlMembersAmong reads which of users $2 are current members of $1.
const sqlMembersAmong = `SELECT user_id FROM member_spans
WHERE conversation_id = $1 AND left_seq IS NULL AND user_id = ANY($2::bigint[])`

// MembersAmong returns which of users are current members of conv.
func (r *Reader) MembersAmong(ctx context.Context, conv int64, users []int64) ([]int64, error) {
	rs, err := r.convDB(conv).Query(ctx, sqlMembersAmong, conv, users)
	if err != nil {
		return nil, fmt.Errorf("read the members of %d among %d users: %w", conv, len(users), err)
	}
	defer rs.Close()
	var out []int64
	for rs.Next() {
		var u int64
		if err := rs.Scan(&u); err != nil {
			return nil, fmt.Errorf("read the members of %d: %w", conv, err)
		}
		out = append(out, u)
	}
	return out, rs.Err()
}

// sqlLargeNew reads a conversation's newest messages after a seq ($2),
// $3 at most; sqlLargeChanged its messages changed after a change count.
// No reader's own reaction is marked: the messages go to many readers.
var (
	sqlLargeNew = `SELECT ` + rows.MessageCols + ` FROM messages m
WHERE m.conversation_id = $1 AND m.seq > $2 AND m.seq <= $4 ORDER BY m.seq DESC LIMIT $3`
	sqlLargeChanged = `SELECT ` + rows.MessageCols + ` FROM messages m
WHERE m.conversation_id = $1 AND m.changed_ord > $2 AND m.changed_ord <= $4 AND m.changed_ord > 0
ORDER BY m.changed_ord DESC LIMIT $3`
)

// LargeNews reads what is new in read-mode conversation conv up to the
// position a notification announced: the newest limit messages with
// afterSeq < seq <= uptoSeq, ascending, and the newest limit messages with
// afterChange < changed_ord <= uptoChange, by changed_ord. Never beyond it:
// what committed since comes with its own notification, together with the
// membership tokens of its batch (a member removed there must not get it).
func (r *Reader) LargeNews(ctx context.Context, conv, afterSeq, uptoSeq, afterChange, uptoChange int64, limit int) (msgs, changed []protocol.Message, err error) {
	if msgs, err = r.messagesOf(ctx, sqlLargeNew, conv, afterSeq, uptoSeq, limit); err != nil {
		return nil, nil, err
	}
	if changed, err = r.messagesOf(ctx, sqlLargeChanged, conv, afterChange, uptoChange, limit); err != nil {
		return nil, nil, err
	}
	return msgs, changed, nil
}

// messagesOf runs one of the reads of LargeNews and reverses its rows.
func (r *Reader) messagesOf(ctx context.Context, sql string, conv, after, upto int64, limit int) ([]protocol.Message, error) {
	rs, err := r.convDB(conv).Query(ctx, sql, conv, after, limit, upto)
	if err != nil {
		return nil, fmt.Errorf("read the news of conversation %d: %w", conv, err)
	}
	defer rs.Close()
	var out []protocol.Message
	for rs.Next() {
		var s rows.MessageScan
		if err := rs.Scan(s.Targets()...); err != nil {
			return nil, fmt.Errorf("read the news of conversation %d: %w", conv, err)
		}
		if m := s.Message(); m != nil {
			out = append(out, *m)
		}
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read the news of conversation %d: %w", conv, err)
	}
	slices.Reverse(out)
	return out, nil
}
