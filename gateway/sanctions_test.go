package gateway

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/apikey"
	"github.com/inboxd/inboxd/protocol"
)

// sanction is PUT (or, with del, DELETE) .../{bans,mutes}/{uid}.
func (u *user) sanction(t testing.TB, method, kind string, cid, uid int64, body any, hdr ...string) resp {
	t.Helper()
	return u.do(t, method, fmt.Sprintf("/v1/conversations/%d/%s/%d", cid, kind, uid), body, hdr...)
}

// TestBanAndMuteAuthorization: who may ban and mute whom, answered by the
// gateway: an owner (1), an admin (2), a moderator (3) and a member (4)
// on the member 5 and on the moderator 3; an outsider (9) is no member.
func TestBanAndMuteAuthorization(t *testing.T) {
	tg := newGateway(t, nil) // roles not enforced: bans and mutes follow roles anyway
	for _, kind := range []string{"bans", "mutes"} {
		for _, tc := range []struct {
			target int64
			want   map[int64]string // the error code per actor ("": allowed)
		}{
			{5, map[int64]string{4: "forbidden", 9: "not_member"}},
			{3, map[int64]string{3: "forbidden", 4: "forbidden", 9: "not_member"}},
		} {
			for _, a := range []int64{1, 2, 3, 4, 9} {
				t.Run(fmt.Sprintf("%s/%d by %d", kind, tc.target, a), func(t *testing.T) {
					owner := tg.user(t, 1)
					cid := owner.create(t, "sanctions", 2, 3, 4, 5)
					require.Equal(t, http.StatusAccepted, owner.setRole(t, cid, 2, "admin").status)
					require.Equal(t, http.StatusAccepted, owner.setRole(t, cid, 3, "moderator").status)
					r := tg.user(t, a).sanction(t, "PUT", kind, cid, tc.target, `{}`)
					if want := tc.want[a]; want != "" {
						require.Equal(t, http.StatusForbidden, r.status, "%s", r)
						require.Equal(t, want, errCode(t, r))
						return
					}
					require.Equal(t, http.StatusAccepted, r.status, "%s", r)
				})
			}
		}
	}
	tg.verify(t)
}

// TestBanRoutes: a ban removes the member and refuses adding it again
// (403 early), an unban lets it be added; a retry with the same change_id
// answers as the first call; an until in the past is a 400.
func TestBanRoutes(t *testing.T) {
	tg := newGateway(t, nil)
	owner, mod := tg.user(t, 1), tg.user(t, 2)
	cid := owner.create(t, "bans", 2, 3)
	require.Equal(t, http.StatusAccepted, owner.setRole(t, cid, 2, "moderator").status)

	r := mod.sanction(t, "PUT", "bans", cid, 3, map[string]any{"until": time.Now().Add(-time.Minute)})
	require.Equal(t, http.StatusBadRequest, r.status, "an until in the past: %s", r)
	r = mod.sanction(t, "PUT", "bans", cid, 2, `{}`)
	require.Equal(t, http.StatusForbidden, r.status, "itself: %s", r)

	change := uuid.NewString()
	r = mod.sanction(t, "PUT", "bans", cid, 3, map[string]any{"until": time.Now().Add(time.Hour), "change_id": change})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	require.Equal(t, []string{"1:owner", "2:moderator"}, owner.members(t, cid), "the ban removed 3")
	r = mod.sanction(t, "PUT", "bans", cid, 3, map[string]any{"until": time.Now().Add(2 * time.Hour), "change_id": change})
	require.Equal(t, http.StatusAccepted, r.status, "a retry: %s", r)
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))

	r = owner.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", cid), `{"user_id": 3}`)
	require.Equal(t, http.StatusForbidden, r.status, "%s", r)
	require.Contains(t, r.String(), "banned")

	r = mod.sanction(t, "DELETE", "bans", cid, 3, nil)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	r = owner.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", cid), `{"user_id": 3}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	require.Equal(t, []string{"1:owner", "2:moderator", "3:member"}, owner.members(t, cid))
	tg.verify(t)
}

// TestMuteRoutes: a muted member's send, edit and reaction are refused
// early (403), its delete passes; an unmute lets it send again; muting
// one who is no member is a 404.
func TestMuteRoutes(t *testing.T) {
	tg := newGateway(t, nil)
	owner, three := tg.user(t, 1), tg.user(t, 3)
	cid := owner.create(t, "mutes", 3)
	mine := three.send(t, cid, "before")
	other := owner.send(t, cid, "theirs")

	r := owner.sanction(t, "PUT", "mutes", cid, 8, `{}`)
	require.Equal(t, http.StatusNotFound, r.status, "no member: %s", r)
	r = owner.sanction(t, "PUT", "mutes", cid, 3, `{}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)

	key := func() []string { return []string{"Idempotency-Key", uuid.NewString()} }
	for name, r := range map[string]resp{
		"send": three.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid), `{"body": "hush"}`, key()...),
		"edit": three.do(t, "PATCH", fmt.Sprintf("/v1/conversations/%d/messages/%d", cid, mine.Seq), `{"body": "edited"}`, key()...),
		"react": three.do(t, "PUT", fmt.Sprintf("/v1/conversations/%d/messages/%d/reaction", cid, other.Seq),
			`{"emoji": "+1"}`, key()...),
	} {
		require.Equal(t, http.StatusForbidden, r.status, "%s: %s", name, r)
		require.Contains(t, r.String(), "muted", name)
	}
	r = three.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/messages/%d", cid, mine.Seq), nil, key()...)
	require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, r.status, "a muted member deletes its own: %s", r)

	r = owner.sanction(t, "DELETE", "mutes", cid, 3, nil)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	three.send(t, cid, "after")
	tg.verify(t)
}

// sanctionList is GET path as "user[ until]" in user order (200 required).
func sanctionList(t testing.TB, u *user, path string) []string {
	t.Helper()
	r := u.do(t, "GET", path, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var l protocol.SanctionList
	r.decode(t, &l)
	out := []string{}
	for _, s := range l.Sanctions {
		e := fmt.Sprintf("%d by %d", s.UserID, s.By)
		if s.Until != nil {
			e += " until"
		}
		out = append(out, e)
	}
	return out
}

// TestSanctionListsAndServerRoutes: the standing bans and mutes are
// listed to moderators and above only, page by page; the server API bans,
// mutes and lifts as a service (set_by 0), lists them, and its adds are
// refused early for a banned user as the projection would.
func TestSanctionListsAndServerRoutes(t *testing.T) {
	tg := newGateway(t, serverTestConfig)
	owner, mod, member := tg.user(t, 1), tg.user(t, 2), tg.user(t, 3)
	cid := owner.create(t, "lists", 2, 3, 4, 5)
	require.Equal(t, http.StatusAccepted, owner.setRole(t, cid, 2, "moderator").status)
	bans := fmt.Sprintf("/v1/conversations/%d/bans", cid)
	mutes := fmt.Sprintf("/v1/conversations/%d/mutes", cid)

	require.Equal(t, http.StatusAccepted, mod.sanction(t, "PUT", "bans", cid, 4, `{}`).status)
	require.Equal(t, http.StatusAccepted, mod.sanction(t, "PUT", "bans", cid, 9, map[string]any{"until": time.Now().Add(time.Hour)}).status)
	require.Equal(t, http.StatusAccepted, mod.sanction(t, "PUT", "mutes", cid, 5, `{}`).status)
	require.Equal(t, []string{"4 by 2", "9 by 2 until"}, sanctionList(t, mod, bans))
	require.Equal(t, []string{"5 by 2"}, sanctionList(t, owner, mutes))
	r := mod.do(t, "GET", bans+"?limit=1", nil)
	var page protocol.SanctionList
	r.decode(t, &page)
	require.Len(t, page.Sanctions, 1)
	require.NotNil(t, page.NextPage)
	require.Equal(t, []string{"9 by 2 until"}, sanctionList(t, mod, bans+"?page="+*page.NextPage))
	r = member.do(t, "GET", bans, nil)
	require.Equal(t, http.StatusForbidden, r.status, "a member does not see the bans: %s", r)
	require.Equal(t, "forbidden", errCode(t, r))
	r = tg.user(t, 8).do(t, "GET", mutes, nil)
	require.Equal(t, http.StatusForbidden, r.status, "%s", r)
	require.Equal(t, "not_member", errCode(t, r))

	svc, _ := tg.service(t, "ops", apikey.ScopeMembers, apikey.ScopeRead)
	server := fmt.Sprintf("/v1/server/conversations/%d", cid)
	r = svc.do(t, "POST", server+"/members", protocol.ServerMembers{UserIDs: []int64{6, 4}}, idem("add-1")...)
	require.Equal(t, http.StatusForbidden, r.status, "4 is banned: %s", r)
	require.Contains(t, r.String(), "banned")
	for range 2 { // a retry answers the same
		r = svc.do(t, "DELETE", server+"/bans/4", nil, idem("unban-1")...)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	}
	r = svc.do(t, "POST", server+"/members", protocol.ServerMembers{UserIDs: []int64{6, 4}}, idem("add-2")...)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	r = svc.do(t, "PUT", server+"/mutes/2", `{}`, idem("mute-1")...)
	require.Equal(t, http.StatusAccepted, r.status, "a service mutes a moderator: %s", r)
	r = svc.do(t, "PUT", server+"/mutes/8", `{}`, idem("mute-2")...)
	require.Equal(t, http.StatusNotFound, r.status, "8 is no member: %s", r)
	r = svc.do(t, "PUT", server+"/bans/3", `{}`)
	require.Equal(t, http.StatusBadRequest, r.status, "no Idempotency-Key: %s", r)
	require.Equal(t, []string{"2 by 0", "5 by 2"}, sanctionList(t, svc, server+"/mutes"))
	require.Equal(t, []string{"9 by 2 until"}, sanctionList(t, svc, server+"/bans"))
	r = mod.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid), map[string]any{"msg_id": uuid.NewString(), "body": "hi"})
	require.Equal(t, http.StatusForbidden, r.status, "the moderator is muted: %s", r)
	tg.verify(t)
}

// TestSanctionOfNonMemberAnswersWhenProjected: a ban of a user who is no
// member (in advance) and the unban of one the ban removed answer once
// projected, as the member changes do, not when the ack wait runs out:
// the banned user gets no entry to wake the wait, the acting member does.
// The bound is half the ack wait; the answers come in milliseconds.
func TestSanctionOfNonMemberAnswersWhenProjected(t *testing.T) {
	const ackWait = 30 * time.Second
	tg := newGateway(t, func(c *Config) { c.AckWait = ackWait })
	owner := tg.user(t, 1)
	cid := owner.create(t, "sanctions", 2)
	for _, c := range []struct {
		method string
		uid    int64
		banned []string // the users banned after it
	}{
		{"PUT", 5, []string{"5"}},      // in advance
		{"PUT", 2, []string{"2", "5"}}, // a member: removed
		{"DELETE", 2, []string{"5"}},   // no member any more
		{"DELETE", 5, []string{}},      // never one
	} {
		at := time.Now()
		r := owner.sanction(t, c.method, "bans", cid, c.uid, `{}`)
		took := time.Since(at)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
		require.Less(t, took, ackWait/2, "%s bans/%d waited for the ack wait", c.method, c.uid)
		rows, err := tg.g.srv.Conv(cid).Query(t.Context(),
			`SELECT user_id::text FROM sanctions WHERE conversation_id = $1 AND kind = 'ban' ORDER BY user_id`, cid)
		require.NoError(t, err)
		banned, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, c.banned, banned, "after %s bans/%d", c.method, c.uid)
	}
}
