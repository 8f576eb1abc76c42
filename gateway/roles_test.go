package gateway

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/apikey"
	"github.com/inboxd/inboxd/protocol"
)

// setRole is PUT .../members/{uid}/role; it returns the answer.
func (u *user) setRole(t testing.TB, cid, uid int64, role string, hdr ...string) resp {
	t.Helper()
	return u.do(t, "PUT", fmt.Sprintf("/v1/conversations/%d/members/%d/role", cid, uid), protocol.SetRole{Role: role}, hdr...)
}

// members is GET .../members as "user:role" in user order.
func (u *user) members(t testing.TB, cid int64) []string {
	t.Helper()
	r := u.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/members", cid), nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var l protocol.MemberList
	r.decode(t, &l)
	var out []string
	for _, m := range l.Members {
		out = append(out, fmt.Sprintf("%d:%s", m.UserID, m.Role))
	}
	return out
}

// TestRolesAuthorization is the table of who may do what, answered by the
// gateway: an owner (1), an admin (2), a moderator (3), a member (4) and
// an outsider (9) add a member, remove the member 5, make 5 a moderator,
// and delete 5's message, each in a conversation of its own.
func TestRolesAuthorization(t *testing.T) {
	tg := newGateway(t, func(c *Config) { c.ConversationRoles = true })
	const ok, denied, outside = http.StatusAccepted, "forbidden", "not_member"
	actors := []int64{1, 2, 3, 4, 9}
	for _, tc := range []struct {
		name string
		do   func(u *user, cid int64, five protocol.Message) resp
		want map[int64]string // the error code per actor ("": allowed)
	}{
		{"add a member", func(u *user, cid int64, _ protocol.Message) resp {
			return u.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", cid), `{"user_id": 7}`)
		}, map[int64]string{3: denied, 4: denied, 9: outside}},
		{"remove a member", func(u *user, cid int64, _ protocol.Message) resp {
			return u.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/5", cid), nil)
		}, map[int64]string{3: denied, 4: denied, 9: outside}},
		{"remove the admin", func(u *user, cid int64, _ protocol.Message) resp {
			return u.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/2", cid), nil)
		}, map[int64]string{3: denied, 4: denied, 9: outside}}, // the admin leaves
		{"make a member a moderator", func(u *user, cid int64, _ protocol.Message) resp {
			return u.setRole(t, cid, 5, "moderator")
		}, map[int64]string{3: denied, 4: denied, 9: outside}},
		{"make a member an admin", func(u *user, cid int64, _ protocol.Message) resp {
			return u.setRole(t, cid, 5, "admin")
		}, map[int64]string{2: denied, 3: denied, 4: denied, 9: outside}},
		{"delete another's message", func(u *user, cid int64, five protocol.Message) resp {
			return u.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/messages/%d", cid, five.Seq), nil, "Idempotency-Key", uuid.NewString())
		}, map[int64]string{4: denied, 9: outside}},
	} {
		for _, a := range actors {
			t.Run(fmt.Sprintf("%s/by %d", tc.name, a), func(t *testing.T) {
				owner := tg.user(t, 1)
				cid := owner.create(t, "roles", 2, 3, 4, 5)
				require.Equal(t, ok, owner.setRole(t, cid, 2, "admin").status)
				require.Equal(t, ok, owner.setRole(t, cid, 3, "moderator").status)
				five := tg.user(t, 5).send(t, cid, "mine")
				r := tc.do(tg.user(t, a), cid, five)
				if want := tc.want[a]; want != "" {
					require.Equal(t, http.StatusForbidden, r.status, "%s", r)
					require.Equal(t, want, errCode(t, r))
					return
				}
				require.Contains(t, []int{http.StatusAccepted, http.StatusOK}, r.status, "%s", r)
			})
		}
	}
	tg.verify(t)
}

// TestRolesRoutes: the role route's answers and effects: the members list
// shows roles, a transfer of ownership demotes the owner to admin and is
// a system message, a retry with the same change_id answers as the first
// call, a member always leaves, and the server API sets any role.
func TestRolesRoutes(t *testing.T) {
	tg := newGateway(t, func(c *Config) { serverTestConfig(c); c.ConversationRoles = true })
	owner, two, three := tg.user(t, 1), tg.user(t, 2), tg.user(t, 3)
	cid := owner.create(t, "roles", 2, 3)
	require.Equal(t, []string{"1:owner", "2:member", "3:member"}, two.members(t, cid))

	for _, c := range []struct {
		body any
		code string
	}{
		{`{"role": "king"}`, "bad_request"},
		{`{}`, "bad_request"},
	} {
		r := owner.do(t, "PUT", fmt.Sprintf("/v1/conversations/%d/members/2/role", cid), c.body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r)
	}
	r := owner.setRole(t, cid, 8, "admin")
	require.Equal(t, http.StatusNotFound, r.status, "a user who is no member: %s", r)
	r = owner.setRole(t, cid, 1, "admin")
	require.Equal(t, http.StatusForbidden, r.status, "its own role: %s", r)

	// A transfer, retried with its change_id: the same answer, once.
	change := uuid.NewString()
	r = owner.setRole(t, cid, 2, "owner", "Idempotency-Key", change)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	require.Equal(t, []string{"1:admin", "2:owner", "3:member"}, three.members(t, cid))
	r = owner.setRole(t, cid, 2, "owner", "Idempotency-Key", change)
	require.Equal(t, http.StatusAccepted, r.status, "a retry, though 1 is no longer the owner: %s", r)
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
	var roleMsgs int
	for _, m := range messagesOf(three.sync(t, "after=0").Entries) {
		if m.Kind == "system" && msgSystem(t, m)["event"] == "member.role_set" {
			roleMsgs++
			sys := msgSystem(t, m)
			require.Equal(t, "owner", sys["role"])
			require.EqualValues(t, 2, sys["user_id"])
			require.EqualValues(t, 1, sys["previous_owner"])
		}
	}
	require.Equal(t, 1, roleMsgs, "one system message for the transfer")

	// The admin may not touch the owner; anyone leaves.
	r = owner.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/2", cid), nil)
	require.Equal(t, http.StatusForbidden, r.status, "%s", r)
	r = two.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/2", cid), nil)
	require.Equal(t, http.StatusAccepted, r.status, "the owner leaves: %s", r)
	require.Equal(t, []string{"1:admin", "3:member"}, three.members(t, cid))

	// The service gives the conversation an owner again; a retry is the same call.
	svc, _ := tg.service(t, "ops", apikey.ScopeMembers)
	path := fmt.Sprintf("/v1/server/conversations/%d/members/3/role", cid)
	for range 2 {
		r = svc.do(t, "PUT", path, protocol.SetRole{Role: "owner"}, idem("role-1")...)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	}
	require.Equal(t, []string{"1:admin", "3:owner"}, three.members(t, cid))
	r = svc.do(t, "PUT", fmt.Sprintf("/v1/server/conversations/%d/members/8/role", cid), protocol.SetRole{Role: "admin"}, idem("role-2")...)
	require.Equal(t, http.StatusNotFound, r.status, "%s", r)
	r = svc.do(t, "PUT", path, protocol.SetRole{Role: "admin"})
	require.Equal(t, http.StatusBadRequest, r.status, "no Idempotency-Key: %s", r)
	tg.verify(t)
}

// TestRolesEnforcedByCreation: whether a conversation enforces roles is
// fixed at its creation, by its request or else the deployment's
// setting; a member adds others only where roles are not enforced.
func TestRolesEnforcedByCreation(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("conversation-roles=%v", on), func(t *testing.T) {
			tg := newGateway(t, func(c *Config) { c.ConversationRoles = on })
			owner, member := tg.user(t, 1), tg.user(t, 2)
			for _, c := range []struct {
				body     string
				enforced bool
			}{
				{`{"title": "default", "members": [2]}`, on},
				{`{"title": "asked", "members": [2], "roles": true}`, true},
				{`{"title": "declined", "members": [2], "roles": false}`, false},
			} {
				r := owner.do(t, "POST", "/v1/conversations", c.body)
				require.Equal(t, http.StatusCreated, r.status, "%s", r)
				var made protocol.ConversationCreated
				r.decode(t, &made)
				r = member.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", made.ConversationID), `{"user_id": 3}`)
				if c.enforced {
					require.Equal(t, http.StatusForbidden, r.status, "%s: %s", c.body, r)
					require.Equal(t, "forbidden", errCode(t, r))
				} else {
					require.Equal(t, http.StatusAccepted, r.status, "%s: %s", c.body, r)
				}
			}
		})
	}
}
