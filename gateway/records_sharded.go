package gateway

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/inboxd/inboxd/gateway/internal/rows"
	"github.com/inboxd/inboxd/gateway/internal/servers"
	"github.com/inboxd/inboxd/protocol"
)

// The conversation list on a sharded placement. A user's records are on
// its own server (the user's side: pinned, muted, read position, removed,
// version) and copied, with the same rule state, on each conversation's
// server, beside what orders the list (the conversation's last activity).
// So the page is chosen by asking every server for its own conversations
// in list order and merging, and each record of the page is then read as
// on one server: the user's side from the user's server, the rest on the
// conversation's (rows.SQLRecordsGiven). A record whose user's side is
// not there yet (its copy is ahead: the user stage has not applied it) is
// left out of the page; its entry comes after the head the list was taken
// at, so the client gets it by syncing.

// listKey is a record's place in the list order.
type listKey struct {
	conv     int64
	pinned   bool
	activity time.Time
}

// before reports whether a comes before b: pinned first, newest activity
// first, then the higher conversation id.
func (a listKey) before(b listKey) bool {
	if a.pinned != b.pinned {
		return a.pinned
	}
	if !a.activity.Equal(b.activity) {
		return a.activity.After(b.activity)
	}
	return a.conv > b.conv
}

// sqlRecordsSinceKeys is sqlRecordsSince's page on the user's server: the
// conversations of the records changed after $2, in version order.
const sqlRecordsSinceKeys = `SELECT conversation_id, version FROM records WHERE user_id = $1 AND version > $2
ORDER BY version LIMIT $3 OFFSET $4`

// listSharded is listRecords on several servers.
func listSharded(ctx context.Context, srv *servers.Servers, user int64, p listParams, byVersion bool, offset int64) ([]protocol.Record, *string, error) {
	var keys []listKey
	var versions []int64 // byVersion: the version of each key
	if byVersion {
		since := p.sinceVersion
		if p.page != nil {
			since = p.page.version
		}
		rs, err := srv.User(user).Query(ctx, sqlRecordsSinceKeys, user, since, p.limit+1, offset)
		if err != nil {
			return nil, nil, fmt.Errorf("list records of user %d: %w", user, err)
		}
		for rs.Next() {
			var k listKey
			var v int64
			if err := rs.Scan(&k.conv, &v); err != nil {
				rs.Close()
				return nil, nil, fmt.Errorf("list records of user %d: %w", user, err)
			}
			keys, versions = append(keys, k), append(versions, v)
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, nil, fmt.Errorf("list records of user %d: %w", user, err)
		}
	} else {
		var err error
		if keys, err = listOrder(ctx, srv, user, p, offset); err != nil {
			return nil, nil, err
		}
	}
	more := len(keys) > p.limit
	keys = keys[:min(len(keys), p.limit)]
	convs := make([]int64, len(keys))
	for i, k := range keys {
		convs[i] = k.conv
	}
	recs, err := recordsOf(ctx, srv, user, convs)
	if err != nil {
		return nil, nil, err
	}
	out := []protocol.Record{}
	for _, k := range keys {
		if r, ok := recs[k.conv]; ok {
			out = append(out, r)
		}
	}
	if !more {
		return out, nil, nil
	}
	last := keys[len(keys)-1]
	tok := pageToken{byVersion: byVersion, pinned: last.pinned, activity: last.activity, conv: last.conv}
	if byVersion {
		tok.version = versions[len(keys)-1]
	}
	s := tok.String()
	return out, &s, nil
}

// listOrder merges every server's page of user's records in list order
// (sqlListOrder) and returns the limit+1 keys from offset on.
func listOrder(ctx context.Context, srv *servers.Servers, user int64, p listParams, offset int64) ([]listKey, error) {
	var pinned, activity, conv any
	if p.page != nil {
		pinned, activity, conv = p.page.pinned, p.page.activity, p.page.conv
	}
	want := offset + int64(p.limit) + 1
	var keys []listKey
	for _, db := range srv.Pools {
		rs, err := db.Query(ctx, sqlListOrder, user, pinned, activity, conv, want, 0)
		if err != nil {
			return nil, fmt.Errorf("list records of user %d: %w", user, err)
		}
		for rs.Next() {
			var u int64
			var k listKey
			if err := rs.Scan(&u, &k.conv, &k.pinned, &k.activity); err != nil {
				rs.Close()
				return nil, fmt.Errorf("list records of user %d: %w", user, err)
			}
			keys = append(keys, k)
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, fmt.Errorf("list records of user %d: %w", user, err)
		}
	}
	slices.SortFunc(keys, func(a, b listKey) int {
		switch {
		case a.before(b):
			return -1
		case b.before(a):
			return 1
		}
		return 0
	})
	if offset >= int64(len(keys)) {
		return nil, nil
	}
	return keys[offset:min(int64(len(keys)), want)], nil
}

// recordsOf reads user's records of convs as one server would: the user's
// side on the user's server, the rest on each conversation's. A record
// the user's server does not have is left out.
func recordsOf(ctx context.Context, srv *servers.Servers, user int64, convs []int64) (map[int64]protocol.Record, error) {
	out := make(map[int64]protocol.Record, len(convs))
	if len(convs) == 0 {
		return out, nil
	}
	users := make([]int64, len(convs))
	for i := range users {
		users[i] = user
	}
	type side struct {
		users, convs, reads, versions []int64
		pinned, muted, removed        []bool
	}
	sides := make([]side, len(srv.Pools)) // by conversation server
	rs, err := srv.User(user).Query(ctx, rows.SQLRecordBases, users, convs)
	if err != nil {
		return nil, fmt.Errorf("read the records of user %d: %w", user, err)
	}
	for rs.Next() {
		var epoch, u, c, read, version int64
		var pinned, muted, removed bool
		if err := rs.Scan(&epoch, &u, &c, &pinned, &muted, &read, &version, &removed); err != nil {
			rs.Close()
			return nil, fmt.Errorf("read the records of user %d: %w", user, err)
		}
		sd := &sides[srv.OfConv(c)]
		sd.users, sd.convs, sd.reads, sd.versions = append(sd.users, u), append(sd.convs, c), append(sd.reads, read), append(sd.versions, version)
		sd.pinned, sd.muted, sd.removed = append(sd.pinned, pinned), append(sd.muted, muted), append(sd.removed, removed)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read the records of user %d: %w", user, err)
	}
	for s, sd := range sides {
		if len(sd.convs) == 0 {
			continue
		}
		rs, err := srv.Pools[s].Query(ctx, rows.SQLRecordsGiven, sd.users, sd.convs, sd.pinned, sd.muted, sd.reads, sd.versions, sd.removed)
		if err != nil {
			return nil, fmt.Errorf("read the records of user %d on server %d: %w", user, s+1, err)
		}
		for rs.Next() {
			var epoch, u int64
			var sc rows.RecordScan
			if err := rs.Scan(append([]any{&epoch, &u}, sc.Targets()...)...); err != nil {
				rs.Close()
				return nil, fmt.Errorf("read the records of user %d: %w", user, err)
			}
			if r := sc.Record(); r != nil {
				out[r.ConversationID] = *r
			}
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, fmt.Errorf("read the records of user %d: %w", user, err)
		}
	}
	return out, nil
}
