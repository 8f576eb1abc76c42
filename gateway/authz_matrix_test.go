package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/gateway/apikey"
	"github.com/inboxd/inboxd/protocol"
)

// The authorization matrix: every user-facing route and client frame,
// tried by a user of each standing in a conversation with roles enforced,
// against the answer docs/protocol.md ("Roles", "Ban and mute", "Reports",
// each route's refusals) and docs/websocket.md (the frames) give. It is
// the executable summary of who may do what; TestRolesAuthorization and
// TestBanAndMuteAuthorization go deeper into the roles' own table (whom
// each role may act on).

// The columns: who acts.
const (
	colOwner     = iota // the creator
	colAdmin            // made admin by the owner
	colModerator        // made moderator by the owner
	colMember           // joined at the creation
	colBanned           // a member, then banned (so removed)
	colMuted            // a member, muted
	colOutsider         // never a member
	colRevoked          // a member whose tokens were revoked (server API)
	nCols
)

var colNames = [nCols]string{"owner", "admin", "moderator", "member", "banned", "muted", "outsider", "revoked"}

// colUser is the user of each column.
var colUser = [nCols]int64{1, 2, 3, 4, 5, 6, 9, 7}

// Each column acts on users of its own, so that one fixture serves a row
// and no cell sees another's effect: a member (its target), a user who is
// no member (to add), one banned in advance (to unban), a title, an
// emoji and a report id.
func colTarget(c int) int64   { return 101 + int64(c) }
func colNewcomer(c int) int64 { return 301 + int64(c) }
func colOutlawed(c int) int64 { return 201 + int64(c) }
func colTitle(c int) string   { return "created by the " + colNames[c] }
func colEmoji(c int) string {
	return [nCols]string{"👍", "👀", "🎉", "🙂", "😮", "🔥", "🤔", "👏"}[c]
}
func colReportID(c int) string { return uuid.NewSHA1(uuid.NameSpaceOID, []byte(colNames[c])).String() }

// lastWord is a member who sends the last message of every fixture.
const lastWord = 100

// The answers as the table spells them: the HTTP status, and the error
// code of a refusal; for a frame, what comes back.
const (
	ok200        = "200"
	ok201        = "201"
	ok202        = "202"
	slow429      = "429 rate_limited"
	forbidden403 = "403 forbidden"
	notMember403 = "403 not_member"
	notFound404  = "404 not_found"
	unauth401    = "401 unauthorized"
	nothingFound = "200, nothing found"

	frameAck       = "ack" // send_ack, change_ack, pong
	frameWelcome   = "welcome"
	frameDelivered = "delivered" // typing: shown to another member
	frameDropped   = "dropped"   // typing: no answer, shown to nobody
	frameForbidden = "error forbidden"
	frameNotMember = "error not_member"
	frameRevoked   = "close 4001"
)

// authzRow is one route or frame (route: its "METHOD /path" as the route
// table has it; a frame's is GET /v1/ws). act makes the request of column c and
// returns its answer as the table spells it. state, when set, reads what
// act changes for column c: after an allowed act (a 2xx, an ack, a
// delivery) it must differ from before, after a refusal it must be the
// same; a row that only reads has none. prepare adds what the row needs
// to the fixture before the banned and muted members are sanctioned (so
// that they hold messages and reactions from before).
type authzRow struct {
	name    string
	route   string // "METHOD /path" as in the route table
	prepare func(t *testing.T, f *authzFixture)
	// ready runs once the fixture is complete (after its last word), for
	// what would refuse the fixture's own writes (a freeze, a slow mode).
	ready func(t *testing.T, f *authzFixture)
	act   func(t *testing.T, f *authzFixture, c int) string
	state func(t *testing.T, f *authzFixture, c int) any
	want  [nCols]string
}

// authzWorld is the gateway of the matrix and the tokens of its users.
type authzWorld struct {
	tg *tgw
	// revoked is the revoked column's token; revokedSelf a token of the
	// same user issued after the revocation, to prepare and to read with.
	revoked, revokedSelf string
}

// authzFixture is a row's conversation: the owner, an admin, a
// moderator, a member, the banned and muted ones, the revoked one and
// every column's target, with what the row prepared.
type authzFixture struct {
	w   *authzWorld
	t   *testing.T
	cid int64
	// own: each column's message (the outsider's: its target's); theirs:
	// each column's target's.
	own, theirs [nCols]protocol.Message
	// marker: a conversation of every column's user and target, nothing
	// sanctioned (typing rows).
	marker int64
	// upload: the owner's, not attached; attachment: the owner's, sent.
	upload     protocol.Upload
	attachment protocol.Attachment
}

// actor is the user of column c as the cell acts: with the revoked token
// for the revoked column.
func (f *authzFixture) actor(c int) *user {
	if c == colRevoked {
		return &user{tg: f.w.tg, id: colUser[c], token: f.w.revoked}
	}
	return f.w.tg.user(f.t, colUser[c])
}

// self is the user of column c with a token that works, to prepare and
// to read with.
func (f *authzFixture) self(c int) *user {
	if c == colRevoked {
		return &user{tg: f.w.tg, id: colUser[c], token: f.w.revokedSelf}
	}
	return f.w.tg.user(f.t, colUser[c])
}

func (f *authzFixture) path(format string, a ...any) string {
	return fmt.Sprintf("/v1/conversations/%d", f.cid) + fmt.Sprintf(format, a...)
}

// answer is r as the table spells it.
func answer(t testing.TB, r resp) string {
	t.Helper()
	if r.status < 300 {
		require.NotContains(t, string(r.body), `"pending"`, "the wait for the projection ended first: %s", r)
		return fmt.Sprint(r.status)
	}
	return fmt.Sprintf("%d %s", r.status, errCode(t, r))
}

// http is one request of column c's actor.
func (f *authzFixture) http(c int, method, path string, body any, hdr ...string) string {
	f.t.Helper()
	return answer(f.t, f.actor(c).do(f.t, method, path, body, hdr...))
}

func (f *authzFixture) conv() *pgxpool.Pool { return f.w.tg.g.srv.Conv(f.cid) }

// query reads one value of f's conversation's server.
func (f *authzFixture) query(sql string, args ...any) any {
	f.t.Helper()
	var v any
	require.NoError(f.t, f.conv().QueryRow(context.Background(), sql, args...).Scan(&v))
	return v
}

// blocks says whether blocker blocks blocked, on the blocker's server.
func (f *authzFixture) blocks(blocker, blocked int64) any {
	var b bool
	require.NoError(f.t, f.w.tg.env.UserPool(blocker).QueryRow(context.Background(),
		`SELECT EXISTS (SELECT 1 FROM blocks WHERE blocker_id = $1 AND blocked_id = $2)`, blocker, blocked).Scan(&b))
	return b
}

// setting is one column of the conversation's row (title, frozen,
// slow_mode).
func (f *authzFixture) setting(col string) any {
	return f.query(`SELECT `+col+` FROM conversations WHERE id = $1`, f.cid)
}

// role is uid's role in the conversation, "" when no current member.
func (f *authzFixture) role(uid int64) any {
	return f.query(`SELECT COALESCE((SELECT role FROM member_spans
		WHERE conversation_id = $1 AND user_id = $2 AND left_seq IS NULL), '')`, f.cid, uid)
}

func (f *authzFixture) sanctioned(uid int64, kind string) any {
	return f.query(`SELECT EXISTS (SELECT 1 FROM sanctions WHERE conversation_id = $1 AND user_id = $2 AND kind = $3)`,
		f.cid, uid, kind)
}

// message is the state of the message at seq: its version and whether
// it is deleted.
func (f *authzFixture) message(seq int64) any {
	return f.query(`SELECT format('v%s deleted=%s', version, deleted) FROM messages WHERE conversation_id = $1 AND seq = $2`,
		f.cid, seq)
}

func (f *authzFixture) reaction(seq, uid int64) any {
	return f.query(`SELECT COALESCE((SELECT emoji FROM reactions WHERE conversation_id = $1 AND seq = $2 AND user_id = $3), '')`,
		f.cid, seq, uid)
}

// record is uid's record of the conversation (read on the user's
// server), "" when it has none.
func (f *authzFixture) record(uid int64) any {
	var v string
	require.NoError(f.t, f.w.tg.env.UserPool(uid).QueryRow(context.Background(), `SELECT COALESCE((SELECT
		format('read_seq=%s pinned=%s removed=%s', read_seq, pinned, removed) FROM records
		WHERE user_id = $1 AND conversation_id = $2), '')`, uid, f.cid).Scan(&v))
	return v
}

// ownMessages: every column sends a message of its own (the banned and
// muted ones before their sanction, the revoked one with a token issued
// after the revocation); the outsider's is its target's.
func ownMessages(t *testing.T, f *authzFixture) {
	for c := range nCols {
		if c == colOutsider {
			f.own[c] = f.w.tg.user(t, colTarget(c)).send(t, f.cid, "the outsider's target's")
			continue
		}
		f.own[c] = f.self(c).send(t, f.cid, "the "+colNames[c]+"'s")
	}
}

// theirMessages: every column's target sends a message.
func theirMessages(t *testing.T, f *authzFixture) {
	for c := range nCols {
		f.theirs[c] = f.w.tg.user(t, colTarget(c)).send(t, f.cid, "for the "+colNames[c])
	}
}

// TestAuthorizationMatrix: the matrix (see the top of the file), each row
// on a conversation of its own, each cell with users of its own.
func TestAuthorizationMatrix(t *testing.T) {
	tg := attachGateway(t, func(t *testing.T, base string) attachments.Store {
		st, err := attachments.NewLocal(t.TempDir(), base, []byte("local-store-secret-0123456789"))
		require.NoError(t, err)
		return st
	}, func(c *AttachmentsConfig) { c.Types = []string{"text/plain"} })
	w := &authzWorld{tg: tg, revoked: tokenWith(t, colUser[colRevoked], "", time.Now().Add(-10*time.Second))}

	// The revoked column: its token is refused on the gateway (and its
	// session closed) within the bound of TestRevocations, before any row.
	admin, _ := tg.service(t, "security", apikey.ScopeSessions)
	revokeMeasured(t, admin, "the matrix's revoked member", map[string]any{"user_id": colUser[colRevoked]},
		watchRevocation(t, colUser[colRevoked], w.revoked, tg))
	w.revokedSelf = tokenWith(t, colUser[colRevoked], "", time.Now().Add(2*time.Second))

	rows := authzRows()
	t.Run("every user route has a row", func(t *testing.T) {
		covered := map[string]bool{}
		for _, row := range rows {
			covered[row.route] = true
		}
		for _, rt := range tg.g.routes {
			if rt.auth || rt.path == "/v1/ws" {
				require.True(t, covered[rt.pattern()], "%s: no row of the authorization matrix; add its rows to authzRows", rt.pattern())
				delete(covered, rt.pattern())
			}
		}
		require.Empty(t, covered, "rows of routes the gateway does not have")
	})
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			f := newAuthzFixture(t, w, row.prepare)
			if row.ready != nil {
				row.ready(t, f)
			}
			var got [nCols]string
			for c := range nCols {
				var before any
				if row.state != nil {
					before = row.state(t, f, c)
				}
				got[c] = row.act(t, f, c)
				if row.state == nil || got[c] != row.want[c] {
					continue
				}
				after := row.state(t, f, c)
				if allowed(got[c]) {
					require.NotEqual(t, before, after, "%s by the %s: answered %s but changed nothing", row.name, colNames[c], got[c])
				} else {
					require.Equal(t, before, after, "%s by the %s: refused (%s) but changed something", row.name, colNames[c], got[c])
				}
			}
			for c := range nCols {
				require.Equal(t, row.want[c], got[c], "%s by the %s\nwant %q\ngot  %q", row.name, colNames[c], row.want, got)
			}
		})
	}
	tg.verify(t)
}

// allowed says whether an answer as the table spells it lets the action
// happen.
func allowed(a string) bool {
	return a[0] == '2' || a == frameAck || a == frameDelivered || a == frameWelcome
}

// newAuthzFixture creates a row's conversation (roles enforced) with
// every column's user but the outsider's and every target, gives the
// admin and the moderator their roles, runs prepare, then bans and mutes.
func newAuthzFixture(t *testing.T, w *authzWorld, prepare func(*testing.T, *authzFixture)) *authzFixture {
	t.Helper()
	f := &authzFixture{w: w, t: t}
	owner := f.self(colOwner)
	members := []int64{lastWord}
	for c := range nCols {
		if c != colOwner && c != colOutsider {
			members = append(members, colUser[c])
		}
		members = append(members, colTarget(c))
	}
	r := owner.do(t, "POST", "/v1/conversations", map[string]any{"title": "authz", "members": members, "roles": true})
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	var made protocol.ConversationCreated
	r.decode(t, &made)
	f.cid = made.ConversationID
	require.Equal(t, http.StatusAccepted, owner.setRole(t, f.cid, colUser[colAdmin], "admin").status)
	require.Equal(t, http.StatusAccepted, owner.setRole(t, f.cid, colUser[colModerator], "moderator").status)
	if prepare != nil {
		prepare(t, f)
	}
	require.Equal(t, http.StatusAccepted, owner.sanction(t, "PUT", "bans", f.cid, colUser[colBanned], `{}`).status)
	require.Equal(t, http.StatusAccepted, owner.sanction(t, "PUT", "mutes", f.cid, colUser[colMuted], `{}`).status)
	require.Equal(t, "", f.role(colUser[colBanned]), "the ban removed the banned member")
	// Another member has the last word, so that every column has
	// something left to read (a user's own messages, system ones too,
	// are read as it makes them).
	w.tg.user(t, lastWord).send(t, f.cid, "the last word")
	return f
}

// authzRows is the matrix. Expectations come from the documents, never
// from what the code answers. Rows for routes still to come go where the
// comments say.
func authzRows() []authzRow {
	const (
		O, F, N, X, U = ok200, forbidden403, notMember403, notFound404, unauth401
	)
	key := func() []string { return []string{"Idempotency-Key", uuid.NewString()} }
	return []authzRow{
		// --- The conversation and its members ("Roles", "Ban and mute").
		{name: "create a conversation", route: "POST /v1/conversations",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "POST", "/v1/conversations", map[string]any{"title": colTitle(c), "roles": true})
			},
			state: func(t *testing.T, f *authzFixture, c int) any {
				n := 0
				for _, pool := range f.w.tg.env.Pools {
					var k int
					require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM conversations c
						JOIN member_spans m ON m.conversation_id = c.id AND m.user_id = $2 AND m.role = 'owner' AND m.left_seq IS NULL
						WHERE c.title = $1`, colTitle(c), colUser[c]).Scan(&k))
					n += k
				}
				return n
			},
			want: [nCols]string{ok201, ok201, ok201, ok201, ok201, ok201, ok201, U}},
		{name: "add a member", route: "POST /v1/conversations/{cid}/members",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "POST", f.path("/members"), map[string]any{"user_id": colNewcomer(c)})
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.role(colNewcomer(c)) },
			want:  [nCols]string{ok202, ok202, F, F, N, F, N, U}},
		{name: "remove a member", route: "DELETE /v1/conversations/{cid}/members/{uid}",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "DELETE", f.path("/members/%d", colTarget(c)), nil)
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.role(colTarget(c)) },
			want:  [nCols]string{ok202, ok202, F, F, N, F, N, U}},
		{name: "leave", route: "DELETE /v1/conversations/{cid}/members/{uid}",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "DELETE", f.path("/members/%d", colUser[c]), nil)
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.role(colUser[c]) },
			// The owner leaves too ("An owner who leaves leaves the
			// conversation without one"); the columns after it still
			// act on the roles they have.
			want: [nCols]string{ok202, ok202, ok202, ok202, N, ok202, N, U}},
		{name: "make a member a moderator", route: "PUT /v1/conversations/{cid}/members/{uid}/role",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "PUT", f.path("/members/%d/role", colTarget(c)), protocol.SetRole{Role: "moderator"})
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.role(colTarget(c)) },
			want:  [nCols]string{ok202, ok202, F, F, N, F, N, U}},
		{name: "ban a member", route: "PUT /v1/conversations/{cid}/bans/{uid}",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "PUT", f.path("/bans/%d", colTarget(c)), `{}`)
			},
			state: func(t *testing.T, f *authzFixture, c int) any {
				return fmt.Sprint(f.sanctioned(colTarget(c), "ban"), f.role(colTarget(c)))
			},
			want: [nCols]string{ok202, ok202, ok202, F, N, F, N, U}},
		{name: "unban a user", route: "DELETE /v1/conversations/{cid}/bans/{uid}",
			prepare: func(t *testing.T, f *authzFixture) {
				for c := range nCols {
					r := f.self(colOwner).sanction(t, "PUT", "bans", f.cid, colOutlawed(c), `{}`)
					require.Equal(t, http.StatusAccepted, r.status, "%s", r)
				}
			},
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "DELETE", f.path("/bans/%d", colOutlawed(c)), nil)
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.sanctioned(colOutlawed(c), "ban") },
			want:  [nCols]string{ok202, ok202, ok202, F, N, F, N, U}},
		{name: "mute a member", route: "PUT /v1/conversations/{cid}/mutes/{uid}",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "PUT", f.path("/mutes/%d", colTarget(c)), `{}`)
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.sanctioned(colTarget(c), "mute") },
			want:  [nCols]string{ok202, ok202, ok202, F, N, F, N, U}},
		{name: "unmute a member", route: "DELETE /v1/conversations/{cid}/mutes/{uid}",
			prepare: func(t *testing.T, f *authzFixture) {
				for c := range nCols {
					r := f.self(colOwner).sanction(t, "PUT", "mutes", f.cid, colTarget(c), `{}`)
					require.Equal(t, http.StatusAccepted, r.status, "%s", r)
				}
			},
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "DELETE", f.path("/mutes/%d", colTarget(c)), nil)
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.sanctioned(colTarget(c), "mute") },
			want:  [nCols]string{ok202, ok202, ok202, F, N, F, N, U}},
		{name: "list the members", route: "GET /v1/conversations/{cid}/members",
			act:  func(t *testing.T, f *authzFixture, c int) string { return f.http(c, "GET", f.path("/members"), nil) },
			want: [nCols]string{O, O, O, O, N, O, N, U}},
		{name: "read the receipts", route: "GET /v1/conversations/{cid}/receipts",
			act:  func(t *testing.T, f *authzFixture, c int) string { return f.http(c, "GET", f.path("/receipts"), nil) },
			want: [nCols]string{O, O, O, O, N, O, N, U}},
		{name: "list the bans", route: "GET /v1/conversations/{cid}/bans",
			act:  func(t *testing.T, f *authzFixture, c int) string { return f.http(c, "GET", f.path("/bans"), nil) },
			want: [nCols]string{O, O, O, F, N, F, N, U}},
		{name: "list the mutes", route: "GET /v1/conversations/{cid}/mutes",
			act:  func(t *testing.T, f *authzFixture, c int) string { return f.http(c, "GET", f.path("/mutes"), nil) },
			want: [nCols]string{O, O, O, F, N, F, N, U}},
		// Conversation settings ("Frozen and slow mode"): one row per
		// setting a role limits, each column setting a value of its own
		// (frozen alternates), and the writes a frozen conversation or a
		// slow mode refuses.
		{name: "rename", route: "PATCH /v1/conversations/{cid}",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "PATCH", f.path(""), map[string]any{"title": colTitle(c)})
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.setting("title") },
			want:  [nCols]string{ok202, ok202, F, F, N, F, N, U}},
		{name: "freeze", route: "PATCH /v1/conversations/{cid}",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "PATCH", f.path(""), map[string]any{"frozen": c%2 == 0})
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.setting("frozen") },
			want:  [nCols]string{ok202, ok202, F, F, N, F, N, U}},
		{name: "set the slow mode", route: "PATCH /v1/conversations/{cid}",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "PATCH", f.path(""), map[string]any{"slow_mode": 10 + c})
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.setting("slow_mode") },
			want:  [nCols]string{ok202, ok202, ok202, F, N, F, N, U}},
		{name: "send in a frozen conversation", route: "POST /v1/conversations/{cid}/messages",
			ready: func(t *testing.T, f *authzFixture) {
				r := f.self(colOwner).do(t, "PATCH", f.path(""), map[string]any{"frozen": true})
				require.Equal(t, http.StatusAccepted, r.status, "%s", r)
			},
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "POST", f.path("/messages"), map[string]any{"msg_id": uuid.NewString(), "body": "hi"})
			},
			state: sentBy,
			want:  [nCols]string{ok201, ok201, F, F, N, F, N, U}},
		{name: "send again in slow mode", route: "POST /v1/conversations/{cid}/messages",
			ready: func(t *testing.T, f *authzFixture) {
				r := f.self(colOwner).do(t, "PATCH", f.path(""), map[string]any{"slow_mode": 600})
				require.Equal(t, http.StatusAccepted, r.status, "%s", r)
				for _, c := range []int{colOwner, colAdmin, colModerator, colMember} {
					f.w.tg.user(t, colUser[c]).send(t, f.cid, "the first")
				}
			},
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "POST", f.path("/messages"), map[string]any{"msg_id": uuid.NewString(), "body": "again"})
			},
			state: sentBy,
			want:  [nCols]string{ok201, ok201, ok201, slow429, N, F, N, U}},

		// --- Messages ("POST .../messages", "Changing a message", "Reports").
		{name: "send", route: "POST /v1/conversations/{cid}/messages",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "POST", f.path("/messages"), map[string]any{"msg_id": uuid.NewString(), "body": "hi"})
			},
			state: sentBy,
			want:  [nCols]string{ok201, ok201, ok201, ok201, N, F, N, U}},
		{name: "read the history", route: "GET /v1/conversations/{cid}/messages",
			act: func(t *testing.T, f *authzFixture, c int) string { return f.http(c, "GET", f.path("/messages"), nil) },
			// The banned member was one: it reads up to its removal.
			want: [nCols]string{O, O, O, O, O, O, N, U}},
		{name: "edit its own message", route: "PATCH /v1/conversations/{cid}/messages/{seq}", prepare: ownMessages,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "PATCH", f.path("/messages/%d", f.own[c].Seq), map[string]any{"body": "edited"}, key()...)
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.message(f.own[c].Seq) },
			want:  [nCols]string{O, O, O, O, N, F, N, U}},
		{name: "delete its own message", route: "DELETE /v1/conversations/{cid}/messages/{seq}", prepare: ownMessages,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "DELETE", f.path("/messages/%d", f.own[c].Seq), nil, key()...)
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.message(f.own[c].Seq) },
			want:  [nCols]string{O, O, O, O, N, O, N, U}},
		{name: "delete another's message", route: "DELETE /v1/conversations/{cid}/messages/{seq}", prepare: theirMessages,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "DELETE", f.path("/messages/%d", f.theirs[c].Seq), nil, key()...)
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.message(f.theirs[c].Seq) },
			want:  [nCols]string{O, O, O, F, N, F, N, U}},
		{name: "edit another's message", route: "PATCH /v1/conversations/{cid}/messages/{seq}", prepare: theirMessages,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "PATCH", f.path("/messages/%d", f.theirs[c].Seq), map[string]any{"body": "edited"}, key()...)
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.message(f.theirs[c].Seq) },
			// Only a sender edits; the muted member is refused for its
			// mute before the message's sender is looked at.
			want: [nCols]string{F, F, F, F, N, F, N, U}},
		{name: "react", route: "PUT /v1/conversations/{cid}/messages/{seq}/reaction", prepare: theirMessages,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "PUT", f.path("/messages/%d/reaction", f.theirs[c].Seq), map[string]any{"emoji": colEmoji(c)}, key()...)
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.reaction(f.theirs[c].Seq, colUser[c]) },
			want:  [nCols]string{O, O, O, O, N, F, N, U}},
		{name: "take back its reaction", route: "DELETE /v1/conversations/{cid}/messages/{seq}/reaction", prepare: reactions,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "DELETE", f.path("/messages/%d/reaction", f.theirs[c].Seq), nil, key()...)
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.reaction(f.theirs[c].Seq, colUser[c]) },
			want:  [nCols]string{O, O, O, O, N, O, N, U}},
		{name: "report a message", route: "POST /v1/conversations/{cid}/messages/{seq}/report", prepare: theirMessages,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "POST", f.path("/messages/%d/report", f.theirs[c].Seq),
					map[string]any{"report_id": colReportID(c), "reason": "spam"})
			},
			state: func(t *testing.T, f *authzFixture, c int) any {
				return f.query(`SELECT count(*) FROM reports WHERE conversation_id = $1 AND reporter_id = $2`, f.cid, colUser[c])
			},
			// A member removed since reports what it saw.
			want: [nCols]string{ok201, ok201, ok201, ok201, ok201, ok201, N, U}},

		// --- The user's record of the conversation.
		{name: "mark read", route: "POST /v1/conversations/{cid}/read",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "POST", f.path("/read"), map[string]any{"seq": 1 << 40})
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.record(colUser[c]) },
			want:  [nCols]string{ok202, ok202, ok202, ok202, N, ok202, N, U}},
		{name: "pin", route: "PATCH /v1/conversations/{cid}/record",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "PATCH", f.path("/record"), map[string]any{"pinned": true})
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.record(colUser[c]) },
			want:  [nCols]string{ok202, ok202, ok202, ok202, N, ok202, N, U}},

		// --- Attachments ("Attachments").
		{name: "upload", route: "POST /v1/conversations/{cid}/uploads",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "POST", f.path("/uploads"), map[string]any{"name": "a.txt", "content_type": "text/plain", "size": 5})
			},
			state: func(t *testing.T, f *authzFixture, c int) any {
				return f.query(`SELECT count(*) FROM uploads WHERE conversation_id = $1 AND user_id = $2`, f.cid, colUser[c])
			},
			want: [nCols]string{ok201, ok201, ok201, ok201, N, ok201, N, U}},
		{name: "read the owner's upload", route: "GET /v1/conversations/{cid}/uploads/{id}", prepare: ownerUpload,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "GET", f.path("/uploads/%s", f.upload.ID), nil)
			},
			// The uploader only; 404 to anyone else.
			want: [nCols]string{O, X, X, X, X, X, X, U}},
		{name: "complete the owner's upload", route: "POST /v1/conversations/{cid}/uploads/{id}/complete", prepare: ownerUpload,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "POST", f.path("/uploads/%s/complete", f.upload.ID), nil)
			},
			want: [nCols]string{O, X, X, X, X, X, X, U}},
		{name: "download an attachment", route: "GET /v1/conversations/{cid}/attachments/{id}", prepare: ownerUpload,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "GET", f.path("/attachments/%s?redirect=false", f.attachment.ID), nil)
			},
			// Sent before the ban: the banned member's span covers it.
			want: [nCols]string{O, O, O, O, O, O, N, U}},

		// --- The user's own ("Settings", "Presence", sync, the list).
		{name: "sync", route: "GET /v1/sync",
			act:  func(t *testing.T, f *authzFixture, c int) string { return f.http(c, "GET", "/v1/sync?limit=1", nil) },
			want: [nCols]string{O, O, O, O, O, O, O, U}},
		// Search ("GET /v1/search"): anyone may search; what it finds is
		// what history shows it, so the last word, sent after the ban,
		// is found by every member and by nobody else.
		{name: "search", route: "GET /v1/search",
			act: func(t *testing.T, f *authzFixture, c int) string {
				r := f.actor(c).do(t, "GET", fmt.Sprintf("/v1/search?q=%s&conversation_id=%d", url.QueryEscape(`"the last word"`), f.cid), nil)
				a := answer(t, r)
				if a != ok200 {
					return a
				}
				var res protocol.SearchResults
				r.decode(t, &res)
				if len(res.Results) == 0 {
					return nothingFound
				}
				return a
			},
			want: [nCols]string{O, O, O, O, nothingFound, O, nothingFound, U}},
		{name: "list the conversations", route: "GET /v1/conversations",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "GET", "/v1/conversations?limit=1", nil)
			},
			want: [nCols]string{O, O, O, O, O, O, O, U}},
		{name: "read the settings", route: "GET /v1/settings",
			act:  func(t *testing.T, f *authzFixture, c int) string { return f.http(c, "GET", "/v1/settings", nil) },
			want: [nCols]string{O, O, O, O, O, O, O, U}},
		{name: "change the settings", route: "PATCH /v1/settings",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "PATCH", "/v1/settings", map[string]any{"notifications": false})
			},
			state: func(t *testing.T, f *authzFixture, c int) any {
				r := f.self(c).do(t, "GET", "/v1/settings", nil)
				require.Equal(t, http.StatusOK, r.status, "%s", r)
				return string(r.body)
			},
			want: [nCols]string{O, O, O, O, O, O, O, U}},
		{name: "presence", route: "GET /v1/presence",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "GET", fmt.Sprintf("/v1/presence?user_id=%d", colUser[colOwner]), nil)
			},
			want: [nCols]string{O, O, O, O, O, O, O, U}},
		// Blocks ("Blocks"): the user's own, like the settings, whatever
		// its standing in a conversation. The unblock row undoes what the
		// block row did, so that no later row meets a block.
		{name: "block a user", route: "PUT /v1/blocks/{uid}",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "PUT", fmt.Sprintf("/v1/blocks/%d", colTarget(c)), nil)
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.blocks(colUser[c], colTarget(c)) },
			want:  [nCols]string{ok202, ok202, ok202, ok202, ok202, ok202, ok202, U}},
		{name: "unblock a user", route: "DELETE /v1/blocks/{uid}",
			prepare: func(t *testing.T, f *authzFixture) {
				for c := range nCols {
					if c != colRevoked {
						r := f.self(c).do(t, "PUT", fmt.Sprintf("/v1/blocks/%d", colTarget(c)), nil)
						require.Contains(t, []int{http.StatusAccepted, http.StatusNoContent}, r.status, "%s", r)
					}
				}
			},
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.http(c, "DELETE", fmt.Sprintf("/v1/blocks/%d", colTarget(c)), nil)
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.blocks(colUser[c], colTarget(c)) },
			want:  [nCols]string{ok202, ok202, ok202, ok202, ok202, ok202, ok202, U}},
		{name: "list the blocks", route: "GET /v1/blocks",
			act:  func(t *testing.T, f *authzFixture, c int) string { return f.http(c, "GET", "/v1/blocks", nil) },
			want: [nCols]string{O, O, O, O, O, O, O, U}},

		// --- The WebSocket's client frames (docs/websocket.md, "Frames").
		{route: "GET /v1/ws", name: "ws: hello",
			act: func(t *testing.T, f *authzFixture, c int) string {
				_, a := f.dial(c)
				return a
			},
			want: [nCols]string{frameWelcome, frameWelcome, frameWelcome, frameWelcome, frameWelcome, frameWelcome, frameWelcome, frameRevoked}},
		{route: "GET /v1/ws", name: "ws: ping",
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.frame(c, protocol.Ping{Type: protocol.FramePing}, func(fr protocol.ServerFrame) bool {
					return fr.Type == protocol.FramePong
				})
			},
			want: [nCols]string{frameAck, frameAck, frameAck, frameAck, frameAck, frameAck, frameAck, frameRevoked}},
		{route: "GET /v1/ws", name: "ws: send",
			act: func(t *testing.T, f *authzFixture, c int) string {
				id := uuid.NewString()
				return f.frame(c, protocol.Send{Type: protocol.FrameSend, ConversationID: f.cid, MsgID: id, Body: "hi"},
					func(fr protocol.ServerFrame) bool { return fr.MsgID == id })
			},
			state: sentBy,
			want:  [nCols]string{frameAck, frameAck, frameAck, frameAck, frameNotMember, frameForbidden, frameNotMember, frameRevoked}},
		{route: "GET /v1/ws", name: "ws: edit its own message", prepare: ownMessages,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.change(c, protocol.Change{Type: protocol.FrameEdit, Seq: f.own[c].Seq, Body: "edited"})
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.message(f.own[c].Seq) },
			want:  [nCols]string{frameAck, frameAck, frameAck, frameAck, frameNotMember, frameForbidden, frameNotMember, frameRevoked}},
		{route: "GET /v1/ws", name: "ws: delete its own message", prepare: ownMessages,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.change(c, protocol.Change{Type: protocol.FrameDelete, Seq: f.own[c].Seq})
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.message(f.own[c].Seq) },
			want:  [nCols]string{frameAck, frameAck, frameAck, frameAck, frameNotMember, frameAck, frameNotMember, frameRevoked}},
		{route: "GET /v1/ws", name: "ws: delete another's message", prepare: theirMessages,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.change(c, protocol.Change{Type: protocol.FrameDelete, Seq: f.theirs[c].Seq})
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.message(f.theirs[c].Seq) },
			want:  [nCols]string{frameAck, frameAck, frameAck, frameForbidden, frameNotMember, frameForbidden, frameNotMember, frameRevoked}},
		{route: "GET /v1/ws", name: "ws: react", prepare: theirMessages,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.change(c, protocol.Change{Type: protocol.FrameReact, Seq: f.theirs[c].Seq, Emoji: colEmoji(c)})
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.reaction(f.theirs[c].Seq, colUser[c]) },
			want:  [nCols]string{frameAck, frameAck, frameAck, frameAck, frameNotMember, frameForbidden, frameNotMember, frameRevoked}},
		{route: "GET /v1/ws", name: "ws: take back its reaction", prepare: reactions,
			act: func(t *testing.T, f *authzFixture, c int) string {
				return f.change(c, protocol.Change{Type: protocol.FrameReact, Seq: f.theirs[c].Seq})
			},
			state: func(t *testing.T, f *authzFixture, c int) any { return f.reaction(f.theirs[c].Seq, colUser[c]) },
			want:  [nCols]string{frameAck, frameAck, frameAck, frameAck, frameNotMember, frameAck, frameNotMember, frameRevoked}},
		{route: "GET /v1/ws", name: "ws: typing", prepare: markerConversation,
			act:  typing,
			want: [nCols]string{frameDelivered, frameDelivered, frameDelivered, frameDelivered, frameNotMember, frameDropped, frameNotMember, frameRevoked}},
	}
}

// sentBy counts the messages of column c's user in the conversation.
func sentBy(t *testing.T, f *authzFixture, c int) any {
	return f.query(`SELECT count(*) FROM messages WHERE conversation_id = $1 AND sender_id = $2`, f.cid, colUser[c])
}

// reactions: every column's target sends a message, and every column but
// the outsider reacts to its target's (the banned and muted ones before
// their sanction).
func reactions(t *testing.T, f *authzFixture) {
	theirMessages(t, f)
	for c := range nCols {
		if c == colOutsider {
			continue
		}
		r := f.self(c).do(t, "PUT", f.path("/messages/%d/reaction", f.theirs[c].Seq),
			map[string]any{"emoji": colEmoji(c)}, "Idempotency-Key", uuid.NewString())
		require.Equal(t, http.StatusOK, r.status, "%s", r)
	}
}

// ownerUpload: the owner uploads a file it does not attach, and sends
// another attached.
func ownerUpload(t *testing.T, f *authzFixture) {
	owner := f.self(colOwner)
	f.upload = owner.upload(t, f.cid, "kept.txt", "text/plain", []byte("kept"))
	sent := owner.upload(t, f.cid, "sent.txt", "text/plain", []byte("sent"))
	r := owner.sendFiles(t, f.cid, "a file", sent.ID)
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	m := decodeMsg(t, r)
	require.Len(t, m.Attachments, 1)
	f.attachment = m.Attachments[0]
}

// markerConversation: a conversation of every column's user and target,
// where nobody is sanctioned.
func markerConversation(t *testing.T, f *authzFixture) {
	var members []int64
	for c := range nCols {
		if c != colOwner {
			members = append(members, colUser[c])
		}
		members = append(members, colTarget(c))
	}
	f.marker = f.self(colOwner).create(t, "marker", members...)
}

// dial opens a session of column c's actor and sends its hello (at its
// head, with no catch-up to read): the stream, and "welcome" or the close
// code.
func (f *authzFixture) dial(c int) (*wsStream, string) {
	t := f.t
	t.Helper()
	cl, err := dialWSE(wsURLOf(f.w.tg), http.Header{"Authorization": {"Bearer " + f.actor(c).token}}, nil)
	require.NoError(t, err)
	cl.user = colUser[c]
	s := &wsStream{c: cl, cursor: f.self(c).head(t), done: make(chan struct{})}
	// A refused session may be closed before the hello is written.
	_ = cl.writeJSONE(protocol.Hello{Type: protocol.FrameHello, After: s.cursor})
	go s.read()
	t.Cleanup(func() {
		_ = cl.conn.Close()
		<-s.done
	})
	var a string
	waitFor(t, 30*time.Second, "the welcome of the "+colNames[c], func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case s.welcome != nil:
			a = frameWelcome
		case s.closeCode != 0:
			a = fmt.Sprintf("close %d", s.closeCode)
		}
		return a != ""
	})
	return s, a
}

// frame sends fr on a new session of column c and answers with the
// reply that reply picks: "ack", or "error <code>".
func (f *authzFixture) frame(c int, fr any, reply func(protocol.ServerFrame) bool) string {
	t := f.t
	t.Helper()
	s, a := f.dial(c)
	if a != frameWelcome {
		return a
	}
	s.c.writeJSON(t, fr)
	got := s.waitOther(t, reply)
	if got.Type == protocol.FrameError {
		return "error " + got.Code
	}
	if got.Type == protocol.FrameChangeAck {
		require.False(t, got.Pending, "the wait for the projection ended first")
	}
	return frameAck
}

// change sends the change frame ch (of f's conversation, with a fresh
// change_id) on a new session of column c.
func (f *authzFixture) change(c int, ch protocol.Change) string {
	ch.ChangeID, ch.ConversationID = uuid.NewString(), f.cid
	return f.frame(c, ch, func(fr protocol.ServerFrame) bool { return fr.ChangeID == ch.ChangeID })
}

// typing: column c's actor types in the conversation, then pings (the
// reader handles frames in order: the pong comes after the typing's
// member check and NOTIFY, or its error), then types in the marker
// conversation. Its target, a member of both, watches: a typing frame of
// the conversation before the marker's is "delivered", none "dropped".
func typing(t *testing.T, f *authzFixture, c int) string {
	target := f.w.tg.user(t, colTarget(c))
	cl, err := dialWSE(wsURLOf(f.w.tg), http.Header{"Authorization": {"Bearer " + target.token}}, nil)
	require.NoError(t, err)
	cl.user = target.id
	watcher := cl.stream(t, target.head(t), nil)
	waitFor(t, 30*time.Second, "the watcher's welcome", func() bool {
		watcher.mu.Lock()
		defer watcher.mu.Unlock()
		return watcher.welcome != nil
	})
	s, a := f.dial(c)
	if a != frameWelcome {
		return a
	}
	s.c.writeJSON(t, protocol.Typing{Type: protocol.FrameTyping, ConversationID: f.cid})
	s.c.writeJSON(t, protocol.Ping{Type: protocol.FramePing})
	s.waitOther(t, func(fr protocol.ServerFrame) bool { return fr.Type == protocol.FramePong })
	s.mu.Lock()
	var errs []string
	for _, fr := range s.others {
		if fr.Type == protocol.FrameError {
			errs = append(errs, "error "+fr.Code)
		}
	}
	s.mu.Unlock()
	if len(errs) > 0 {
		require.Len(t, errs, 1)
		return errs[0]
	}
	s.c.writeJSON(t, protocol.Typing{Type: protocol.FrameTyping, ConversationID: f.marker})
	by := func(conv int64) func(protocol.ServerFrame) bool {
		return func(fr protocol.ServerFrame) bool {
			return fr.Type == protocol.FrameTyping && fr.UserID == colUser[c] && fr.ConversationID == conv
		}
	}
	watcher.waitEphemeral(t, "the marker's typing", by(f.marker))
	for _, fr := range watcher.ephemeralFrames() {
		if by(f.cid)(fr) {
			return frameDelivered
		}
	}
	return frameDropped
}

// TestServerAPIScopes: the server API's own axis (docs/protocol.md,
// "Server API", "Credentials"): every route with no key, with a user's
// token, with a key holding every scope but the route's, and with a key
// holding the route's scope: 401, 401, 403 forbidden, then the route's
// answer. The refusals change nothing; the call with the scope changes
// what a write changes.
func TestServerAPIScopes(t *testing.T) {
	tg := newGateway(t, serverTestConfig)
	owner := tg.user(t, 1)
	cid := owner.create(t, "server", 2, 3, 4)
	reported := tg.user(t, 2).send(t, cid, "reported")
	reportID := uuid.NewString()
	r := owner.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages/%d/report", cid, reported.Seq),
		map[string]any{"report_id": reportID, "reason": "spam"})
	require.Equal(t, http.StatusCreated, r.status, "%s", r)

	// read is one value of a query on pool.
	read := func(pool *pgxpool.Pool, sql string, args ...any) any {
		var v any
		require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&v))
		return v
	}
	conv := tg.g.srv.Conv(cid)
	role := func(uid int64) func() any {
		return func() any {
			return read(conv, `SELECT COALESCE((SELECT role FROM member_spans
				WHERE conversation_id = $1 AND user_id = $2 AND left_seq IS NULL), '')`, cid, uid)
		}
	}
	sanctioned := func(uid int64, kind string) func() any {
		return func() any {
			return read(conv, `SELECT EXISTS (SELECT 1 FROM sanctions WHERE conversation_id = $1 AND user_id = $2 AND kind = $3)`, cid, uid, kind)
		}
	}
	p := func(format string, a ...any) string { return ServerPrefix + fmt.Sprintf(format, a...) }
	rows := []struct {
		route, scope string
		method, path string
		body         any
		want         int
		state        func() any // nil: the route only reads
	}{
		{"POST /v1/server/conversations", apikey.ScopeConversations, "POST", p("conversations"),
			map[string]any{"title": "by a service", "members": []int64{5}}, http.StatusCreated, func() any {
				n := int64(0)
				for _, pool := range tg.env.Pools {
					n += read(pool, `SELECT count(*) FROM conversations WHERE title = 'by a service'`).(int64)
				}
				return n
			}},
		{"GET /v1/server/conversations/{cid}", apikey.ScopeRead, "GET", p("conversations/%d", cid), nil, http.StatusOK, nil},
		{"POST /v1/server/conversations/{cid}/members", apikey.ScopeMembers, "POST", p("conversations/%d/members", cid),
			protocol.ServerMembers{UserIDs: []int64{11}}, http.StatusAccepted, role(11)},
		{"POST /v1/server/conversations/{cid}/members/remove", apikey.ScopeMembers, "POST", p("conversations/%d/members/remove", cid),
			protocol.ServerMembers{UserIDs: []int64{4}}, http.StatusAccepted, role(4)},
		{"PUT /v1/server/conversations/{cid}/members/{uid}/role", apikey.ScopeMembers, "PUT", p("conversations/%d/members/3/role", cid),
			protocol.SetRole{Role: "admin"}, http.StatusAccepted, role(3)},
		{"PUT /v1/server/conversations/{cid}/bans/{uid}", apikey.ScopeMembers, "PUT", p("conversations/%d/bans/12", cid),
			map[string]any{}, http.StatusAccepted, sanctioned(12, "ban")},
		{"DELETE /v1/server/conversations/{cid}/bans/{uid}", apikey.ScopeMembers, "DELETE", p("conversations/%d/bans/12", cid),
			nil, http.StatusAccepted, sanctioned(12, "ban")},
		{"GET /v1/server/conversations/{cid}/bans", apikey.ScopeRead, "GET", p("conversations/%d/bans", cid), nil, http.StatusOK, nil},
		{"PUT /v1/server/conversations/{cid}/mutes/{uid}", apikey.ScopeMembers, "PUT", p("conversations/%d/mutes/2", cid),
			map[string]any{}, http.StatusAccepted, sanctioned(2, "mute")},
		{"DELETE /v1/server/conversations/{cid}/mutes/{uid}", apikey.ScopeMembers, "DELETE", p("conversations/%d/mutes/2", cid),
			nil, http.StatusAccepted, sanctioned(2, "mute")},
		{"GET /v1/server/conversations/{cid}/mutes", apikey.ScopeRead, "GET", p("conversations/%d/mutes", cid), nil, http.StatusOK, nil},
		{"PATCH /v1/server/conversations/{cid}", apikey.ScopeConversations, "PATCH", p("conversations/%d", cid),
			map[string]any{"slow_mode": 5}, http.StatusAccepted, func() any {
				return read(conv, `SELECT slow_mode FROM conversations WHERE id = $1`, cid)
			}},
		{"POST /v1/server/conversations/{cid}/messages", apikey.ScopeMessages, "POST", p("conversations/%d/messages", cid),
			protocol.ServerSend{SenderName: "bot", Body: "hi"}, http.StatusCreated, func() any {
				return read(conv, `SELECT count(*) FROM messages WHERE conversation_id = $1 AND sender_id = 0 AND kind = 'text'`, cid)
			}},
		{"PATCH /v1/server/users/{uid}/conversations/{cid}/record", apikey.ScopeRecords, "PATCH", p("users/2/conversations/%d/record", cid),
			map[string]any{"pinned": true}, http.StatusAccepted, func() any {
				return read(tg.env.UserPool(2), `SELECT pinned FROM records WHERE user_id = 2 AND conversation_id = $1`, cid)
			}},
		{"GET /v1/server/users/{uid}/blocks", apikey.ScopeRead, "GET", p("users/2/blocks"), nil, http.StatusOK, nil},
		{"GET /v1/server/users/{uid}/inbox", apikey.ScopeRead, "GET", p("users/2/inbox"), nil, http.StatusOK, nil},
		{"GET /v1/server/reports", apikey.ScopeReports, "GET", p("reports"), nil, http.StatusOK, nil},
		{"POST /v1/server/reports/{id}/resolve", apikey.ScopeReports, "POST", p("reports/%s/resolve", reportID),
			protocol.ResolveReport{Resolution: "dismissed"}, http.StatusOK, func() any {
				return read(conv, `SELECT state FROM reports WHERE id = $1`, reportID)
			}},
		{"POST /v1/server/revocations", apikey.ScopeSessions, "POST", p("revocations"),
			map[string]any{"user_id": 99}, http.StatusCreated, func() any {
				return read(tg.env.Pool, `SELECT count(*) FROM revocations WHERE user_id = 99`)
			}},
	}
	t.Run("every server route has a row", func(t *testing.T) {
		var have, want []string
		for _, row := range rows {
			have = append(have, row.route)
		}
		for _, rt := range tg.g.routes {
			if strings.HasPrefix(rt.path, ServerPrefix) {
				want = append(want, rt.pattern())
			}
		}
		require.ElementsMatch(t, want, have)
	})
	for i, row := range rows {
		t.Run(row.route, func(t *testing.T) {
			var others []string
			for _, s := range apikey.Scopes {
				if s != row.scope {
					others = append(others, s)
				}
			}
			unscoped, _ := tg.service(t, fmt.Sprintf("without-%s-%d", row.scope, i), others...)
			scoped, _ := tg.service(t, fmt.Sprintf("with-%s-%d", row.scope, i), row.scope)
			for _, c := range []struct {
				who  string
				as   *user
				want string
			}{
				{"no key", &user{tg: tg}, unauth401},
				{"a user's token", tg.user(t, 1), unauth401},
				{"a key without the scope", unscoped, forbidden403},
				{"a key with the scope", scoped, fmt.Sprint(row.want)},
			} {
				var before any
				if row.state != nil {
					before = row.state()
				}
				r := c.as.do(t, row.method, row.path, row.body, "Idempotency-Key", uuid.NewString())
				require.Equal(t, c.want, answer(t, r), "%s with %s: %s", row.route, c.who, r)
				if row.state == nil {
					continue
				}
				if after := row.state(); c.want[0] == '2' {
					require.NotEqual(t, before, after, "%s with %s: answered %s but changed nothing", row.route, c.who, c.want)
				} else {
					require.Equal(t, before, after, "%s with %s: refused but changed something", row.route, c.who)
				}
			}
		})
	}
}
